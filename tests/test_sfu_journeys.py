"""Journeys through an SFU (latlab.analysis.sfu_journeys), on synthetic records with known
answers: a publisher's frames, a capture's matched packets that rewrote SSRC and RTP
timestamp per leg, a subscriber's frames under the rewritten names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from latlab.analysis.sfu_journeys import sfu_journeys
from latlab.ingest.browser_records import BrowserFrames, BrowserLog
from latlab.stitch.browser_receiver import OPUS_LOOKAHEAD
from latlab.stitch.kinds import FORWARDING
from latlab.stitch.position import MISSING

MS = 1_000_000
PUB_SSRC, LEG_SSRC, TS_OFFSET = 0x1111, 0x2222, 123_456
FRAMES = 50


def _frames(send: bool, ssrc: int, rtp_ts: np.ndarray, t_ns: np.ndarray, **more) -> BrowserFrames:
    n = len(rtp_ts)
    missing = np.full(n, MISSING, np.int64)
    return BrowserFrames(
        send=np.full(n, send), audio=np.full(n, True), ssrc=np.full(n, ssrc, np.int64),
        rtp_ts=rtp_ts.astype(np.int64), seq=missing, t_ns=t_ns.astype(np.int64),
        bytes=np.full(n, 80, np.int64), capture_ns=more.get("capture_ns", missing),
        receive_ns=more.get("receive_ns", missing), abs_capture_ns=missing,
    )  # fmt: skip


def _room(forward: np.ndarray) -> tuple[list[BrowserLog], pa.Table]:
    """Opus frames every 20 ms; the SFU holds each 0.3 ms (frame i: + 0.01 i ms); the
    subscriber receives 1 ms later and its transform runs 0.5 ms after that. ``forward``
    says which frames the SFU forwarded to the leg; frame 30 never arrives, nor the last
    (still in flight when the subscriber stopped recording: not a loss)."""
    rtp = 1000 + 960 * np.arange(FRAMES)
    sent_ns = 10_000 * MS + 20 * MS * np.arange(FRAMES)
    capture = sent_ns - 12 * MS
    ingress = sent_ns + 2 * MS
    egress = ingress + (0.3 * MS + 0.01 * MS * np.arange(FRAMES)).astype(np.int64)
    pub = _frames(True, PUB_SSRC, rtp, sent_ns, capture_ns=capture)
    fwd = np.flatnonzero(forward)
    arrived = fwd[:-1][fwd[:-1] != 30]
    sub = _frames(False, LEG_SSRC, rtp[arrived] + TS_OFFSET, egress[arrived] + 1.5 * MS,
                  receive_ns=egress[arrived] + 1 * MS)  # fmt: skip
    logs = [BrowserLog("alice", Path("alice.jsonl"), 0, pub),
            BrowserLog("bob", Path("bob.jsonl"), 0, sub)]  # fmt: skip
    forwarded = pa.table({
        "host": ["sfu"] * len(fwd), "status": ["matched"] * len(fwd),
        "ssrc": pa.array([LEG_SSRC] * len(fwd), pa.uint32()),
        "rtp_ts": pa.array(rtp[fwd] + TS_OFFSET, pa.uint32()),
        "egress_ns": egress[fwd], "source_ssrc": pa.array([PUB_SSRC] * len(fwd), pa.uint32()),
        "source_rtp_ts": pa.array(rtp[fwd], pa.uint32()), "ingress_ns": ingress[fwd],
        "layer": pa.array([-1] * len(fwd), pa.int8()),
    })  # fmt: skip
    return logs, forwarded


def test_a_frame_is_followed_from_the_publisher_through_the_sfu_to_the_subscriber() -> None:
    forward = np.ones(FRAMES, dtype=bool)
    forward[10:20] = False  # the leg took another layer for a while: not this one's units
    logs, forwarded = _room(forward)
    [j] = sfu_journeys(logs, forwarded, None)
    assert j.probe_names == [
        "alice/capture", "alice/sender-transform", "sfu/ingress",
        "sfu/egress:bob", "bob/received", "bob/receiver-transform",
    ]  # fmt: skip
    assert j.segment_kinds[2] == FORWARDING
    assert j.stream_id == f"alice->sfu->bob ssrc={PUB_SSRC:08x}"
    assert len(j.times) == forward.sum() - 1
    assert j.counts["lost"] == 1  # frame 30: forwarded, never at the subscriber's transform
    done = j.times[j.complete]
    index = np.flatnonzero(forward)[:-1]
    index = index[index != 30]
    np.testing.assert_array_equal(done[:, 3] - done[:, 2], 0.3 * MS + 0.01 * MS * index)
    np.testing.assert_array_equal(done[:, 4] - done[:, 3], np.full(len(index), MS))
    # capture -> sender transform: 12 ms, and Opus's 6.5 ms look-ahead (the frame's first
    # coded sample was captured that much before its RTP time)
    lookahead = OPUS_LOOKAHEAD * 1_000_000_000 // 48_000
    np.testing.assert_array_equal(done[:, 1] - done[:, 0], np.full(len(index), 12 * MS + lookahead))
    assert j.unit_ns == 20 * MS


def test_nothing_without_a_matched_capture_or_the_other_end() -> None:
    logs, forwarded = _room(np.ones(FRAMES, dtype=bool))
    assert sfu_journeys(logs, None, None) == []
    assert sfu_journeys(logs[:1], forwarded, None) == []  # the subscriber recorded nothing
    unmatched = forwarded.set_column(1, "status", pa.array(["unmatched"] * len(forwarded)))
    assert sfu_journeys(logs, unmatched, None) == []

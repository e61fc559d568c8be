"""Synthetic SFU traffic whose forwarding is known, for the matcher's tests and benchmark
(:mod:`latlab.analysis.forwarding`): a publisher's three simulcast layers and its audio
in, two subscriber legs out with their own numbering, layer switches, a per-leg payload
length change (SRTP tags), losses inside the SFU and retransmissions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from latlab.analysis.forwarding import MATCHED, REPEAT, Packets

SECOND = 1_000_000_000
VIDEO_LEG, AUDIO_LEG = 10, 11
LAYER_CYCLE = (2, 0, 1)  # the video leg's layer, switched every ``switch_s``
PADDING_LEN = 265  # a padding-only packet's payload (255 bytes of padding, an SRTP tag)


@dataclass(frozen=True)
class SyntheticForwarding:
    """Ingress and egress packets, and per egress packet its true source and status."""

    ingress: Packets
    egress: Packets
    source: np.ndarray
    status: np.ndarray


def sfu_traffic(
    seconds: float = 6.0, seed: int = 7, switch_s: float = 2.0, renumber: bool = False
) -> SyntheticForwarding:
    """A run of ``seconds``: video layers 0-2 (30 frames/s of 1, 2 and 4 packets, the
    marker on a frame's last, full-size packets but the last, 90 kHz), audio stream 3
    (50 packets/s of 60-140 bytes, 48 kHz); leg 10 carries the video layer of the moment
    (:data:`LAYER_CYCLE`), leg 11 the audio; dwell 0.2-3 ms, 1 % lost inside, 1 % of the
    forwarded sent again 40 ms later (repeats), 6 bytes more payload on leg 10.

    With ``renumber``, as LiveKit does: the publisher also sends padding-only packets
    (every video layer, after every fifth frame: four of 265 bytes with that frame's
    timestamp), and leg 10 leaves out every other frame (a temporal layer it does not
    forward) and the padding, keeping its numbering contiguous over what it left out
    (a loss inside keeps its gap)."""
    rng = np.random.default_rng(seed)
    ingress = _ingress(rng, seconds, padding=renumber)
    egress, source, status = _forward(ingress, rng, switch_s, renumber)
    return SyntheticForwarding(Packets(**ingress), Packets(**egress), source, status)


def _ingress(rng: np.random.Generator, seconds: float, padding: bool) -> dict[str, np.ndarray]:
    parts = []
    frames = int(30 * seconds)
    for stream, per_frame in enumerate((1, 2, 4)):
        # a frame's packets, then (with padding, every fifth frame) four padding packets
        sent = np.full(frames, per_frame) + np.where(padding & (np.arange(frames) % 5 == 4), 4, 0)
        frame = np.repeat(np.arange(frames), sent)
        part = np.arange(len(frame)) - np.repeat(np.cumsum(sent) - sent, sent)
        last, pad = part == per_frame - 1, part >= per_frame
        parts.append({"t_ns": frame * (SECOND // 30) + part * 200_000 + stream * 50_000,
                      "stream": np.full(len(frame), stream),
                      "seq": (np.arange(len(frame)) + 1000 * stream) % 65_536,
                      "ts": frame * 3000 + 7, "marker": last,
                      "payload_len": np.where(pad, PADDING_LEN, np.where(
                          last, rng.integers(200, 1200, len(frame)), 1180))})  # fmt: skip
    n = int(50 * seconds)
    parts.append({"t_ns": np.arange(n) * (SECOND // 50) + 3_000_000,
                  "stream": np.full(n, 3), "seq": (np.arange(n) + 65_000) % 65_536,
                  "ts": np.arange(n) * 960, "marker": np.zeros(n, bool),
                  "payload_len": rng.integers(60, 140, n)})  # fmt: skip
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(merged["t_ns"], kind="stable")
    return {k: v[order] if v.dtype == bool else v[order].astype(np.int64)
            for k, v in merged.items()}  # fmt: skip


def _forward(
    ingress: dict[str, np.ndarray], rng: np.random.Generator, switch_s: float, renumber: bool
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    t = ingress["t_ns"]
    layer_at = np.asarray(LAYER_CYCLE)[(t // int(switch_s * SECOND)) % len(LAYER_CYCLE)]
    video = (ingress["stream"] < 3) & (ingress["stream"] == layer_at)
    left_out = video & renumber & ((ingress["ts"] // 3000 % 2 == 1)
                                   | (ingress["payload_len"] == PADDING_LEN))  # fmt: skip
    video &= ~left_out
    chosen = np.flatnonzero((video | (ingress["stream"] == 3)) & (rng.random(len(t)) > 0.01))
    leg = np.where(ingress["stream"][chosen] == 3, AUDIO_LEG, VIDEO_LEG)
    epoch = np.where(leg == VIDEO_LEG, layer_at[chosen], 0)
    seq_offset = np.asarray([40_000, 61_000, 5])[epoch] + 17 * leg
    seq_offset -= _left_out_before(ingress["stream"], left_out)[chosen]
    out_seq = (ingress["seq"][chosen] + seq_offset) % 65_536
    out_ts = (ingress["ts"][chosen] + 123_456 * (epoch + 1)) % (1 << 32)
    dwell = rng.integers(200_000, 3_000_000, len(chosen))
    again = rng.random(len(chosen)) < 0.01
    source = np.concatenate([chosen, chosen[again]])
    egress = {"t_ns": np.concatenate([t[chosen] + dwell, t[chosen[again]] + 40_000_000]),
              "stream": np.concatenate([leg, leg[again]]),
              "seq": np.concatenate([out_seq, out_seq[again]]),
              "ts": np.concatenate([out_ts, out_ts[again]]),
              "marker": ingress["marker"][source],
              "payload_len": ingress["payload_len"][source]
              + np.where(np.concatenate([leg, leg[again]]) == VIDEO_LEG, 6, 0)}  # fmt: skip
    status = np.concatenate([np.full(len(chosen), MATCHED), np.full(int(again.sum()), REPEAT)])
    order = np.argsort(egress["t_ns"], kind="stable")
    return {k: v[order] for k, v in egress.items()}, source[order], status[order]


def _left_out_before(stream: np.ndarray, left_out: np.ndarray) -> np.ndarray:
    """Per ingress packet: how many packets of its stream before it were left out (the
    ingress packets are in time order, which is each stream's numbering order)."""
    before = np.zeros(len(stream), dtype=np.int64)
    for s in np.unique(stream):
        mine = np.flatnonzero(stream == s)
        before[mine] = np.cumsum(left_out[mine]) - left_out[mine]
    return before

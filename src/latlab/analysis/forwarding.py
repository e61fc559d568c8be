"""Per-packet dwell inside a forwarder (an SFU), from a capture on its host.

The capture (``latlab-capture``, docs/link-log-format.md) sees every RTP packet the
host received (ingress) and sent (egress) on one kernel clock. An SFU forwards each
incoming packet to every subscriber leg with its own SSRC, sequence numbers and
timestamps (constant offsets per *epoch*, re-based when it switches the leg to another
source, e.g. another simulcast layer), its own header extensions and, under SRTP, a
payload encrypted per leg. What survives, and what :func:`match_forwarded` matches on:

* the sequence number and timestamp *differences* within an epoch (``dseq``, ``dts``);
* the marker bit;
* the payload length (after the header and its extensions; encryption keeps it, up to
  a per-leg constant ``dlen`` when the legs' SRTP tags differ);
* the order: an egress packet comes after its ingress packet, within ``window_ns``.

Every candidate pair (egress packet, earlier ingress packet with the same marker) gives
a key (egress stream, ingress stream, dseq, dts, dlen); the true mapping of an epoch
repeats its key packet after packet, a chance pairing does not. Keys seen on at least
``min_epoch`` egress packets are candidate epochs. For each egress packet, the candidate
whose key also explains most of the packet's neighbours on its stream wins — a chance
fit explains isolated packets, a numbering shifted by one packet inside a run of
equal-sized packets stops at the run's end; a tie is *ambiguous*, a packet no key
explains locally *unmatched* — counted, never guessed. A match stands only if its
*frame* holds (:func:`_frame_holds`): inside a frame of equal-sized packets, an epoch
shifted by one packet explains all but the last. A second egress copy of an ingress
packet on the same leg (a retransmission from the SFU's buffer) is a *repeat*: counted,
not a dwell.

Some SFUs keep a leg's numbering contiguous when they leave packets out: LiveKit drops
the frames of the temporal layers it does not forward (and the publisher's padding) and
shifts the sequence offset by what it dropped, so ``dseq`` changes at every dropped frame
while ``dts`` holds for the whole layer epoch; a run of one constant ``dseq`` may be a
single frame, too short to be an epoch. For the packets the epochs leave unmatched,
:func:`_match_frames` anchors on the frame instead: a *timestamp epoch* (egress stream,
ingress stream, dts, dlen) seen on at least ``min_epoch`` egress packets names, for an
egress frame (its RTP timestamp), the one ingress frame it was forwarded from; the pair
holds when every packet of the egress frame has its ingress packet in that frame under
one ``dseq`` — same marker, payload length off by ``dlen``, received before it was sent.
Of the pairs that hold, the one whose timestamp epoch also explains most of the packet's
neighbours wins; a tie is ambiguous.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from latlab.analysis.rows import unique_rows

MATCHED, UNMATCHED, AMBIGUOUS, REPEAT, EDGE = 0, 1, 2, 3, 4
STATUS_NAMES = {MATCHED: "matched", UNMATCHED: "unmatched", AMBIGUOUS: "ambiguous",
                REPEAT: "repeat", EDGE: "edge"}  # fmt: skip
DEFAULT_WINDOW_NS = 500_000_000
DEFAULT_MIN_EPOCH = 8
NEIGHBOURS = 8  # packets each side of an egress packet on its stream that vote on its key
MIN_LOCAL = 3  # neighbours the winning key must also explain
MAX_DLEN = 64  # payload-length change a leg may apply (SRTP tag sizes differ by <= 6)
_CHUNK_PAIRS = 4_000_000  # candidate pairs formed at a time (memory bound)
_SEQ = 1 << 16


@dataclass(frozen=True)
class Packets:
    """RTP packets of one direction, sorted by time; ``stream`` indexes the caller's
    stream table (one stream per transport and SSRC)."""

    t_ns: np.ndarray
    stream: np.ndarray
    seq: np.ndarray
    ts: np.ndarray
    marker: np.ndarray
    payload_len: np.ndarray

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass(frozen=True)
class Epoch:
    """One constant mapping from an ingress stream onto an egress stream."""

    egress_stream: int
    ingress_stream: int
    dseq: int
    dts: int
    dlen: int
    packets: int
    first_ns: int
    last_ns: int


@dataclass(frozen=True)
class Forwarding:
    """For each egress packet: its status and (when matched) its ingress packet."""

    status: np.ndarray
    ingress_index: np.ndarray
    dwell_ns: np.ndarray
    epochs: tuple[Epoch, ...]

    def counts(self, mask: np.ndarray | None = None) -> dict[str, int]:
        """Egress packets per status (of those in ``mask``)."""
        status = self.status if mask is None else self.status[mask]
        found = np.bincount(status, minlength=len(STATUS_NAMES))
        return {name: int(found[code]) for code, name in STATUS_NAMES.items()}


def match_forwarded(
    ingress: Packets,
    egress: Packets,
    window_ns: int = DEFAULT_WINDOW_NS,
    min_epoch: int = DEFAULT_MIN_EPOCH,
) -> Forwarding:
    """Match every egress packet to the ingress packet it was forwarded from."""
    e_all, i_all = candidate_pairs(ingress, egress, window_ns)
    uniq, key_id = unique_rows(_pair_keys(ingress, egress, e_all, i_all))
    uniq = np.ascontiguousarray(uniq.T)  # one row per key
    pairs = _Pairs(e_all, i_all, key_id)
    on_epoch = (_support(pairs.e, pairs.key, len(uniq)) >= min_epoch)[pairs.key]
    e_idx, i_idx, key_id = pairs.e[on_epoch], pairs.i[on_epoch], pairs.key[on_epoch]
    local = _local_support(e_idx, key_id, egress.stream)
    status, ingress_index, winner = _resolve(len(egress), e_idx, i_idx, key_id, local)
    _unless_frame_holds(ingress, egress, uniq, (status, ingress_index, winner))
    _match_frames(ingress, egress, pairs, uniq, min_epoch, (status, ingress_index, winner))
    _mark_repeats(status, ingress_index, egress.stream)
    _mark_edges(status, egress.stream)
    dwell = np.full(len(egress), -1, dtype=np.int64)
    ok = status == MATCHED
    dwell[ok] = egress.t_ns[ok] - ingress.t_ns[ingress_index[ok]]
    return Forwarding(status, ingress_index, dwell, _epochs(uniq, winner, status, egress.t_ns))


@dataclass(frozen=True)
class _Pairs:
    """Candidate (egress, ingress) pairs and each pair's key (a row of the unique keys)."""

    e: np.ndarray
    i: np.ndarray
    key: np.ndarray

    def where(self, mask: np.ndarray) -> _Pairs:
        """The pairs ``mask`` selects."""
        return _Pairs(self.e[mask], self.i[mask], self.key[mask])


def _support(e_idx: np.ndarray, key_id: np.ndarray, n_keys: int) -> np.ndarray:
    """Per key, the egress packets it explains (each once: a duplicated ingress copy
    pairs twice)."""
    per_packet = unique_rows(np.stack([e_idx, key_id]))[0]
    return np.bincount(per_packet[1], minlength=n_keys)


def candidate_pairs(
    ingress: Packets, egress: Packets, window_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """(egress, ingress) index pairs: ingress at most ``window_ns`` before, same marker,
    payload lengths within :data:`MAX_DLEN`."""
    lo = np.searchsorted(ingress.t_ns, egress.t_ns - window_ns, side="left")
    hi = np.searchsorted(ingress.t_ns, egress.t_ns, side="right")
    counts = hi - lo
    bounds = np.searchsorted(np.cumsum(counts), np.arange(0, counts.sum(), _CHUNK_PAIRS))
    edges = [*bounds.tolist(), len(egress)]
    e_parts, i_parts = [], []
    for start, stop in itertools.pairwise(edges):
        if stop <= start:
            continue
        n = counts[start:stop]
        e_idx = np.repeat(np.arange(start, stop), n)
        within = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        i_idx = np.repeat(lo[start:stop], n) + within
        keep = (egress.marker[e_idx] == ingress.marker[i_idx]) & (
            np.abs(egress.payload_len[e_idx] - ingress.payload_len[i_idx]) <= MAX_DLEN
        )
        e_parts.append(e_idx[keep])
        i_parts.append(i_idx[keep])
    if not e_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(e_parts), np.concatenate(i_parts)


def _pair_keys(
    ingress: Packets, egress: Packets, e_idx: np.ndarray, i_idx: np.ndarray
) -> np.ndarray:
    """One column per pair: egress stream, ingress stream, dseq, dts, dlen."""
    dseq = (egress.seq[e_idx] - ingress.seq[i_idx]) % (1 << 16)
    dts = (egress.ts[e_idx] - ingress.ts[i_idx]) % (1 << 32)
    dlen = egress.payload_len[e_idx] - ingress.payload_len[i_idx]
    keys = np.stack([egress.stream[e_idx], ingress.stream[i_idx], dseq, dts, dlen])
    return keys.astype(np.int64).reshape(5, -1)


def _local_support(e_idx: np.ndarray, key_id: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Per (egress packet, key) pair: how many of the packet's :data:`NEIGHBOURS` nearest
    packets on its egress stream, before and after, the same key also explains. A true
    mapping explains the packets around it; a chance fit of the numbering does not, and
    a numbering shifted by one packet inside a run of equal-sized packets stops at the
    run's end."""
    position = np.empty(len(stream), dtype=np.int64)
    order = np.lexsort((np.arange(len(stream)), stream))
    position[order] = np.arange(len(stream))  # streams are contiguous in this order
    unique = unique_rows(np.stack([key_id, position[e_idx]]))[0]
    span = len(stream) + 2 * NEIGHBOURS + 1
    placed = unique[0] * span + unique[1]  # sorted: by key, then position
    at = key_id * span + position[e_idx]
    below = np.searchsorted(placed, at - NEIGHBOURS, side="left")
    above = np.searchsorted(placed, at + NEIGHBOURS, side="right")
    return above - below - 1  # the packet itself does not count


def _resolve(
    n_egress: int, e_idx: np.ndarray, i_idx: np.ndarray, key_id: np.ndarray, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Status, ingress index and winning key per egress packet. Of its epoch pairs, the
    one whose key explains most of its neighbourhood wins, if that is at least
    :data:`MIN_LOCAL` neighbours and more than any other pair's key explains; a tie is
    ambiguous, a packet no key explains locally is unmatched."""
    status = np.full(n_egress, UNMATCHED, dtype=np.int64)
    ingress_index = np.full(n_egress, -1, dtype=np.int64)
    winner = np.full(n_egress, -1, dtype=np.int64)
    if not len(e_idx):
        return status, ingress_index, winner
    order = np.lexsort((-local, e_idx))  # per egress packet, best local support first
    e, i, k, score = e_idx[order], i_idx[order], key_id[order], local[order]
    first = np.r_[True, e[1:] != e[:-1]]
    best = np.flatnonzero(first)
    runner_up = best + 1
    has_second = (runner_up < len(e)) & ~np.r_[first[1:], True][best]
    second = np.where(has_second, score[np.minimum(runner_up, len(e) - 1)], -1)
    # the same ingress packet under two keys is one candidate, not a tie
    same = has_second & (i[np.minimum(runner_up, len(e) - 1)] == i[best])
    second = np.where(same, -1, second)
    strong = score[best] >= MIN_LOCAL
    clear = strong & (score[best] > second)
    status[e[best[strong & ~clear]]] = AMBIGUOUS
    won = best[clear]
    status[e[won]] = MATCHED
    ingress_index[e[won]] = i[won]
    winner[e[won]] = k[won]
    return status, ingress_index, winner


def _unless_frame_holds(
    ingress: Packets,
    egress: Packets,
    uniq: np.ndarray,
    result: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Undo the matches whose frame does not hold under their epoch (:func:`_frame_holds`):
    inside a frame of equal-sized packets, an epoch shifted by one packet explains all but
    the last (whose marker or size differ); with a leg renumbered at every dropped frame,
    that shifted epoch can be the only one near (its true one too short to be an epoch)."""
    status, ingress_index, winner = result
    won = np.flatnonzero(status == MATCHED)
    held = _frame_holds(ingress, egress, _Pairs(won, ingress_index[won], winner[won]), uniq)
    undone = won[~held]
    status[undone], ingress_index[undone], winner[undone] = UNMATCHED, -1, -1


def _match_frames(
    ingress: Packets,
    egress: Packets,
    pairs: _Pairs,
    uniq: np.ndarray,
    min_epoch: int,
    result: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Match the packets the epochs left unmatched (or tied) frame by frame (module docstring):
    ``result`` (status, ingress index, winning key per egress packet) is updated. Of the
    pairs whose frames hold, the one whose timestamp epoch also explains most of the
    packet's neighbours wins, as in :func:`_resolve`: a chance fit of one frame (packets
    of recurring sizes) explains isolated packets, the forwarding the whole epoch."""
    status = result[0]
    open_ = status[pairs.e] != MATCHED  # unmatched, or two epochs tied
    if not open_.any():
        return
    stream_ts = uniq[:, [0, 1, 3, 4]]  # egress stream, ingress stream, dts, dlen
    ts_keys, ts_key = unique_rows(stream_ts.T)
    ts_key = ts_key[pairs.key]
    asked = np.isin(ts_key, ts_key[open_])  # only the timestamp keys open packets have
    pairs, ts_key, open_ = pairs.where(asked), ts_key[asked], open_[asked]
    ts_epoch = (_support(pairs.e, ts_key, ts_keys.shape[1]) >= min_epoch)[ts_key]
    pairs, ts_key, open_ = pairs.where(ts_epoch), ts_key[ts_epoch], open_[ts_epoch]
    local = _local_support(pairs.e, ts_key, egress.stream)
    pairs, local = pairs.where(open_), local[open_]
    if not len(pairs.e):
        return
    held = _frame_holds(ingress, egress, pairs, uniq)
    found = pairs.where(held)
    by_frame = _resolve(len(egress), found.e, found.i, found.key, local[held])
    settled = by_frame[0] != UNMATCHED
    for mine, theirs in zip(result, by_frame, strict=True):
        mine[settled] = theirs[settled]


def _frame_holds(ingress: Packets, egress: Packets, pairs: _Pairs, uniq: np.ndarray) -> np.ndarray:
    """Per pair: whether every packet of the egress packet's frame (its stream and RTP
    timestamp) has its ingress packet in the paired packet's frame under the pair's
    ``dseq``, with the same marker, the payload length off by the pair's ``dlen``, and
    received before it was sent."""
    e_frames, i_frames = _Frames(egress), _Frames(ingress)
    dseq, dlen = uniq[pairs.key, 2], uniq[pairs.key, 4]
    quads, quad = unique_rows(np.stack([e_frames.of[pairs.e], i_frames.of[pairs.i], dseq, dlen]))
    size = e_frames.size[quads[0]]
    row = np.repeat(np.arange(quads.shape[1]), size)
    member = e_frames.members[np.repeat(e_frames.start[quads[0]], size) + _ranks(size)]
    source = i_frames.find(quads[1][row], (egress.seq[member] - quads[2][row]) % _SEQ)
    ok = source >= 0
    src = np.maximum(source, 0)
    ok &= egress.marker[member] == ingress.marker[src]
    ok &= ingress.t_ns[src] <= egress.t_ns[member]
    ok &= egress.payload_len[member] - ingress.payload_len[src] == quads[3][row]
    failed = np.bincount(row[~ok], minlength=quads.shape[1])
    return (failed == 0)[quad]


def _ranks(size: np.ndarray) -> np.ndarray:
    """0, 1, ... size[k]-1 for each k, concatenated."""
    return np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)


class _Frames:
    """The frames of one direction: packets of one stream with one RTP timestamp, each
    sequence number once (its first copy)."""

    def __init__(self, packets: Packets) -> None:
        """Group ``packets`` by (stream, RTP timestamp)."""
        frames, self.of = unique_rows(np.stack([packets.stream, packets.ts]))
        place = self.of * _SEQ + packets.seq
        self.keys, self.members = np.unique(place, return_index=True)  # first copies
        self.size = np.bincount(self.keys // _SEQ, minlength=frames.shape[1])
        self.start = np.cumsum(self.size) - self.size

    def find(self, frame: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """The packet with sequence number ``seq`` in ``frame`` (-1 where none)."""
        want = frame * _SEQ + seq
        at = np.minimum(np.searchsorted(self.keys, want), len(self.keys) - 1)
        return np.where(self.keys[at] == want, self.members[at], -1)


def _mark_repeats(status: np.ndarray, ingress_index: np.ndarray, stream: np.ndarray) -> None:
    """The same ingress packet sent twice on one leg: the first copy is the forward, a
    later one a repeat (a retransmission)."""
    matched = np.flatnonzero(status == MATCHED)
    order = np.lexsort((matched, ingress_index[matched], stream[matched]))
    ranked = matched[order]
    same = (stream[ranked][1:] == stream[ranked][:-1]) & (
        ingress_index[ranked][1:] == ingress_index[ranked][:-1]
    )
    status[ranked[1:][same]] = REPEAT


def _mark_edges(status: np.ndarray, stream: np.ndarray) -> None:
    """Unmatched packets of a leg before its first or after its last matched one are at its
    *edge*: no ingress packet explains them because the SFU made them itself (LiveKit sends
    a new subscriber blank VP8 key frames until the publisher's arrive, and silent Opus
    frames when a publisher leaves), or because their source fell outside the capture.
    Unmatched packets between two matched ones stay unmatched, and so does every packet of
    a leg none of whose packets matched. Egress is in time order."""
    if not len(status):
        return
    order = np.argsort(stream, kind="stable")  # per leg, in time order
    _, starts = np.unique(stream[order], return_index=True)
    leg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
    position = np.arange(len(order))
    matched = status[order] == MATCHED
    first = np.minimum.reduceat(np.where(matched, position, len(order)), starts)[leg]
    last = np.maximum.reduceat(np.where(matched, position, -1), starts)[leg]
    edge = (status[order] == UNMATCHED) & (last >= 0) & ((position < first) | (position > last))
    status[order[edge]] = EDGE


def _epochs(
    uniq: np.ndarray, winner: np.ndarray, status: np.ndarray, t_ns: np.ndarray
) -> tuple[Epoch, ...]:
    """The keys that matched packets, with their packets, in order of first packet (a
    key the leg came back to, e.g. after switching layers away and back with the same
    offsets, is one epoch spanning both)."""
    matched = np.flatnonzero(status == MATCHED)
    keys, first_at, count = np.unique(winner[matched], return_index=True, return_counts=True)
    last = np.full(len(uniq), np.iinfo(np.int64).min)
    np.maximum.at(last, winner[matched], t_ns[matched])
    out = [Epoch(*(int(v) for v in uniq[k]), int(n), int(t_ns[matched[f]]), int(last[k]))
           for k, f, n in zip(keys, first_at, count, strict=True)]  # fmt: skip
    return tuple(sorted(out, key=lambda e: (e.egress_stream, e.first_ns)))

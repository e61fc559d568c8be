//! MPEG transport stream scanning for `pes` records (`docs/trace-format.md`).
//!
//! Runs on the streaming thread: a [`PesTracker`] is allocated once per thread
//! and never grows; scanning a buffer reads its bytes in place, allocates
//! nothing and takes no lock. Malformed packets are skipped, never trusted.

use lltrace::NONE;

/// Size of a TS packet.
pub const TS_PACKET: usize = 188;
/// Number of (pad, PID) streams a thread tracks; the least recently used is evicted.
pub const TRACKED: usize = 32;

const SYNC: u8 = 0x47;

/// One PES that starts in a TS packet, with what is known of the PES before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PesStart {
    pub pid: u16,
    pub stream_id: u8,
    /// PTS in 90 kHz ticks (33 bits), [`NONE`] if absent.
    pub pts: u64,
    /// DTS in 90 kHz ticks (33 bits), [`NONE`] if absent.
    pub dts: u64,
    /// `PES_packet_length` (0 = unbounded).
    pub pes_packet_length: u16,
    /// Byte offset of the TS packet within the buffer.
    pub packet_offset: u32,
    /// `random_access_indicator` of the packet's adaptation field.
    pub random_access: bool,
    /// t_ns of the buffer with the last TS packet of the previous PES, [`NONE`] if unknown.
    pub prev_t_ns: u64,
    /// Elementary-stream bytes of the previous PES, [`NONE`] if unknown.
    pub prev_es_bytes: u64,
}

/// The state of one (pad, PID) stream.
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    pad_id: u32,
    pid: u16,
    used: bool,
    /// Whether `bytes`/`header_len` describe a PES in progress.
    in_pes: bool,
    /// TS payload bytes of the current PES, its header included.
    bytes: u64,
    /// Length of the current PES's header, [`NONE`] if it was cut off.
    header_len: u64,
    /// t_ns of the last buffer that carried a packet of this PID.
    last_t_ns: u64,
    /// Last use, for eviction.
    stamp: u64,
}

/// Per-thread, fixed-capacity PES state keyed by (pad_id, PID).
pub struct PesTracker {
    streams: [Stream; TRACKED],
    clock: u64,
}

impl Default for PesTracker {
    fn default() -> Self {
        PesTracker {
            streams: [Stream::default(); TRACKED],
            clock: 0,
        }
    }
}

/// Whether `size` bytes can be a whole number of TS packets.
#[inline]
pub fn plausible_ts_size(size: usize) -> bool {
    size != 0 && size.is_multiple_of(TS_PACKET)
}

/// Whether `data` is a non-empty sequence of TS packets, each starting with the sync byte.
pub fn is_ts(data: &[u8]) -> bool {
    plausible_ts_size(data.len()) && data.chunks_exact(TS_PACKET).all(|p| p[0] == SYNC)
}

/// The parsed header of one TS packet.
struct TsPacket<'a> {
    pid: u16,
    pusi: bool,
    random_access: bool,
    payload: &'a [u8],
}

/// Parses a TS packet header; `None` for a packet to ignore (bad sync,
/// transport error, adaptation field longer than the packet).
fn parse_ts(pkt: &[u8; TS_PACKET]) -> Option<TsPacket<'_>> {
    if pkt[0] != SYNC || pkt[1] & 0x80 != 0 {
        return None;
    }
    let pid = u16::from_be_bytes([pkt[1] & 0x1f, pkt[2]]);
    let afc = (pkt[3] >> 4) & 3;
    let mut start = 4;
    let mut random_access = false;
    if afc & 2 != 0 {
        let af_len = pkt[4] as usize;
        if 5 + af_len > TS_PACKET {
            return None;
        }
        random_access = af_len > 0 && pkt[5] & 0x40 != 0;
        start = 5 + af_len;
    }
    let payload = if afc & 1 != 0 { &pkt[start..] } else { &[][..] };
    Some(TsPacket {
        pid,
        pusi: pkt[1] & 0x40 != 0,
        random_access,
        payload,
    })
}

/// Whether a PES with this stream_id carries the optional PES header.
fn has_pes_header(stream_id: u8) -> bool {
    !matches!(
        stream_id,
        0xBC | 0xBE | 0xBF | 0xF0 | 0xF1 | 0xFF | 0xF2 | 0xF8
    )
}

/// A 33-bit PTS/DTS from its 5-byte encoding.
fn timestamp(b: &[u8]) -> u64 {
    (u64::from(b[0] >> 1) & 7) << 30
        | u64::from(b[1]) << 22
        | u64::from(b[2] >> 1) << 15
        | u64::from(b[3]) << 7
        | u64::from(b[4] >> 1)
}

/// What a PES header at the start of a payload says.
struct PesHeader {
    stream_id: u8,
    pes_packet_length: u16,
    /// 9 + PES_header_data_length, [`NONE`] if the packet is too short to tell.
    header_len: u64,
    pts: u64,
    dts: u64,
}

/// Classifies a PUSI payload: `None` if it is not a PES start code,
/// `Some(None)` for a PES without the optional header, else its header.
fn parse_pes(payload: &[u8]) -> Option<Option<PesHeader>> {
    if payload.len() < 4 || payload[..3] != [0, 0, 1] {
        return None;
    }
    let stream_id = payload[3];
    if !has_pes_header(stream_id) {
        return Some(None);
    }
    let pes_packet_length = match payload.get(4..6) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => 0,
    };
    let mut h = PesHeader {
        stream_id,
        pes_packet_length,
        header_len: NONE,
        pts: NONE,
        dts: NONE,
    };
    if payload.len() < 9 {
        return Some(Some(h));
    }
    let header_len = 9 + payload[8] as usize;
    h.header_len = header_len as u64;
    let flags = payload[7] >> 6;
    let fields = &payload[9..header_len.min(payload.len())];
    if flags & 2 != 0 && fields.len() >= 5 {
        h.pts = timestamp(&fields[..5]);
        if flags == 3 && fields.len() >= 10 {
            h.dts = timestamp(&fields[5..10]);
        }
    }
    Some(Some(h))
}

impl PesTracker {
    /// Scans the TS packets of `data` (a buffer pushed on `pad_id` at `t_ns`);
    /// calls `emit` for every PES that starts in it, in buffer order.
    ///
    /// `data` must satisfy [`is_ts`]; other data is ignored.
    pub fn scan(&mut self, pad_id: u32, t_ns: u64, data: &[u8], mut emit: impl FnMut(&PesStart)) {
        if !is_ts(data) {
            return;
        }
        for (i, pkt) in data.chunks_exact(TS_PACKET).enumerate() {
            let pkt: &[u8; TS_PACKET] = pkt.try_into().expect("chunks are packet-sized");
            let offset = (i * TS_PACKET).min(u32::MAX as usize) as u32;
            self.packet(pad_id, t_ns, pkt, offset, &mut emit);
        }
    }

    /// Handles one TS packet found at byte `offset` of a buffer.
    pub fn packet(
        &mut self,
        pad_id: u32,
        t_ns: u64,
        pkt: &[u8; TS_PACKET],
        offset: u32,
        emit: &mut impl FnMut(&PesStart),
    ) {
        let Some(ts) = parse_ts(pkt) else { return };
        let pes = if ts.pusi { parse_pes(ts.payload) } else { None };
        match pes {
            Some(Some(h)) => {
                let s = self
                    .stream(pad_id, ts.pid, true)
                    .expect("created on demand");
                let (prev_t_ns, prev_es_bytes) = if s.in_pes {
                    let es = match s.header_len {
                        NONE => NONE,
                        n => s.bytes.checked_sub(n).unwrap_or(NONE),
                    };
                    (s.last_t_ns, es)
                } else {
                    (NONE, NONE)
                };
                s.in_pes = true;
                s.bytes = ts.payload.len() as u64;
                s.header_len = h.header_len;
                s.last_t_ns = t_ns;
                emit(&PesStart {
                    pid: ts.pid,
                    stream_id: h.stream_id,
                    pts: h.pts,
                    dts: h.dts,
                    pes_packet_length: h.pes_packet_length,
                    packet_offset: offset,
                    random_access: ts.random_access,
                    prev_t_ns,
                    prev_es_bytes,
                });
            }
            Some(None) => {
                // A PES without the optional header ends the one in progress.
                if let Some(s) = self.stream(pad_id, ts.pid, false) {
                    s.in_pes = false;
                    s.last_t_ns = t_ns;
                }
            }
            None => {
                if let Some(s) = self.stream(pad_id, ts.pid, false) {
                    if ts.pusi {
                        s.in_pes = false; // a section or garbage: the PES in progress ended
                    }
                    s.bytes += ts.payload.len() as u64;
                    s.last_t_ns = t_ns;
                }
            }
        }
    }

    /// The stream of (pad_id, pid); with `create`, takes a free or the least
    /// recently used slot when it is not tracked.
    fn stream(&mut self, pad_id: u32, pid: u16, create: bool) -> Option<&mut Stream> {
        self.clock += 1;
        let stamp = self.clock;
        let found = self
            .streams
            .iter()
            .position(|s| s.used && s.pad_id == pad_id && s.pid == pid);
        let idx = match found {
            Some(i) => i,
            None if create => {
                let i = (0..TRACKED)
                    .min_by_key(|&i| (self.streams[i].used, self.streams[i].stamp))
                    .expect("TRACKED > 0");
                self.streams[i] = Stream {
                    pad_id,
                    pid,
                    used: true,
                    ..Stream::default()
                };
                i
            }
            None => return None,
        };
        let s = &mut self.streams[idx];
        s.stamp = stamp;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes a 33-bit timestamp with the given 4-bit prefix.
    fn ts_bytes(prefix: u8, t: u64) -> [u8; 5] {
        [
            prefix << 4 | ((t >> 29) as u8 & 0x0e) | 1,
            (t >> 22) as u8,
            ((t >> 14) as u8 & 0xfe) | 1,
            (t >> 7) as u8,
            ((t << 1) as u8) | 1,
        ]
    }

    /// A PES header for `stream_id` with optional PTS/DTS and `extra` stuffing bytes.
    fn pes_header(stream_id: u8, pts: Option<u64>, dts: Option<u64>, extra: usize) -> Vec<u8> {
        let mut fields = Vec::new();
        let flags = match (pts, dts) {
            (Some(p), Some(d)) => {
                fields.extend(ts_bytes(3, p));
                fields.extend(ts_bytes(1, d));
                0xC0
            }
            (Some(p), None) => {
                fields.extend(ts_bytes(2, p));
                0x80
            }
            _ => 0,
        };
        fields.extend(std::iter::repeat_n(0xFF, extra));
        let mut h = vec![0, 0, 1, stream_id, 0, 0, 0x80, flags, fields.len() as u8];
        h.extend(fields);
        h
    }

    /// A TS packet of `pid` carrying `payload` (padded with an adaptation field).
    fn packet(pid: u16, pusi: bool, rai: bool, payload: &[u8]) -> [u8; TS_PACKET] {
        assert!(payload.len() <= 184);
        let mut p = [0xFFu8; TS_PACKET];
        p[0] = SYNC;
        p[1] = (pid >> 8) as u8 & 0x1f | if pusi { 0x40 } else { 0 };
        p[2] = pid as u8;
        let room = 184 - payload.len();
        if room == 0 && !rai {
            p[3] = 0x10;
            p[4..].copy_from_slice(payload);
            return p;
        }
        // An adaptation field fills the room (at least 2 bytes when there is a flag byte).
        let af_len = room.max(if rai { 2 } else { 1 }) - 1;
        assert_eq!(
            af_len + 1 + payload.len(),
            184,
            "payload too long for a RAI flag"
        );
        p[3] = 0x30;
        p[4] = af_len as u8;
        if af_len > 0 {
            p[5] = if rai { 0x40 } else { 0 };
        }
        p[5 + af_len..].copy_from_slice(payload);
        p
    }

    fn scan_all(
        t: &mut PesTracker,
        pad: u32,
        t_ns: u64,
        pkts: &[[u8; TS_PACKET]],
    ) -> Vec<PesStart> {
        let data: Vec<u8> = pkts.iter().flatten().copied().collect();
        let mut out = Vec::new();
        t.scan(pad, t_ns, &data, |p| out.push(*p));
        out
    }

    #[test]
    fn decodes_pts_and_dts() {
        let pts = (1u64 << 33) - 12345;
        let dts = 0x1_2345_6789;
        let mut t = PesTracker::default();
        let pes = pes_header(0xE0, Some(pts), Some(dts), 0);
        let got = scan_all(&mut t, 1, 10, &[packet(0x41, true, true, &pes)]);
        assert_eq!(got.len(), 1);
        let g = got[0];
        assert_eq!((g.pid, g.stream_id, g.pts, g.dts), (0x41, 0xE0, pts, dts));
        assert!(g.random_access);
        assert_eq!((g.prev_t_ns, g.prev_es_bytes), (NONE, NONE));

        let pes = pes_header(0xC0, Some(90000), None, 3);
        let got = scan_all(&mut t, 1, 20, &[packet(0x42, true, false, &pes)]);
        assert_eq!(
            (got[0].pts, got[0].dts, got[0].random_access),
            (90000, NONE, false)
        );
        let pes = pes_header(0xC0, None, None, 0);
        let got = scan_all(&mut t, 1, 30, &[packet(0x43, true, false, &pes)]);
        assert_eq!((got[0].pts, got[0].dts), (NONE, NONE));
    }

    #[test]
    fn counts_es_bytes_across_packets_and_buffers() {
        let mut t = PesTracker::default();
        let mut first = pes_header(0xE0, Some(1000), None, 2);
        let header_len = first.len();
        first.extend(std::iter::repeat_n(7u8, 184 - header_len));
        let es_in_first = 184 - header_len;
        let cont = [9u8; 184];
        let tail = [9u8; 50];
        let got = scan_all(
            &mut t,
            3,
            100,
            &[
                packet(0x41, true, false, &first),
                packet(0x41, false, false, &cont),
            ],
        );
        assert_eq!(got.len(), 1);
        // Another PID in between changes nothing; the tail packet comes in a later buffer.
        let got = scan_all(
            &mut t,
            3,
            200,
            &[
                packet(0x100, false, false, &cont),
                packet(0x41, false, false, &tail),
            ],
        );
        assert!(got.is_empty());
        let next = pes_header(0xE0, Some(4000), None, 0);
        let got = scan_all(
            &mut t,
            3,
            300,
            &[
                packet(0, true, false, &[0, 0, 0xB0]),
                packet(0x41, true, true, &next),
            ],
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].packet_offset, 188);
        assert_eq!(got[0].prev_t_ns, 200);
        assert_eq!(got[0].prev_es_bytes, (es_in_first + 184 + 50) as u64);
        assert_eq!(got[0].pts, 4000);
        // The same PID on another pad is a separate stream.
        let got = scan_all(&mut t, 4, 400, &[packet(0x41, true, false, &next)]);
        assert_eq!(got[0].prev_es_bytes, NONE);
    }

    #[test]
    fn adaptation_only_packets_carry_no_payload() {
        let mut t = PesTracker::default();
        let mut pes = pes_header(0xE0, Some(1), None, 0);
        pes.extend([5u8; 20]);
        scan_all(&mut t, 1, 1, &[packet(0x41, true, false, &pes)]);
        let mut af_only = packet(0x41, false, false, &[]);
        af_only[3] = 0x20; // adaptation field only, length 183
        assert_eq!(af_only[4], 183);
        let got = scan_all(&mut t, 1, 2, &[af_only, packet(0x41, true, false, &pes)]);
        assert_eq!(got[0].prev_es_bytes, 20);
        assert_eq!(got[0].prev_t_ns, 2);
    }

    #[test]
    fn evicts_the_least_recently_used_stream() {
        let mut t = PesTracker::default();
        let mut pes = pes_header(0xE0, Some(1), None, 0);
        pes.push(5);
        for pid in 0..TRACKED as u16 + 1 {
            scan_all(&mut t, 1, 1, &[packet(0x100 + pid, true, false, &pes)]);
        }
        // PID 0x100 was evicted by the 33rd stream, the others are still known.
        let got = scan_all(&mut t, 1, 2, &[packet(0x100, true, false, &pes)]);
        assert_eq!(got[0].prev_es_bytes, NONE);
        let got = scan_all(
            &mut t,
            1,
            2,
            &[packet(0x100 + TRACKED as u16, true, false, &pes)],
        );
        assert_eq!(got[0].prev_es_bytes, 1);
    }

    #[test]
    fn ignores_garbage_and_truncation() {
        let mut t = PesTracker::default();
        let mut n = 0;
        let pes = pes_header(0xE0, Some(1), Some(2), 0);
        let good = packet(0x41, true, false, &pes);
        // Not whole packets, or a packet without the sync byte: nothing at all.
        t.scan(1, 1, &good[..187], |_| n += 1);
        let mut two = [good, good].concat();
        two[188] = 0x46;
        t.scan(1, 1, &two, |_| n += 1);
        t.scan(1, 1, &[], |_| n += 1);
        assert_eq!(n, 0);
        // Adaptation field length past the packet, payload cut inside the PES header,
        // PUSI without a start code, a padding stream, random bytes: no panic.
        let mut bad_af = good;
        bad_af[3] = 0x30;
        bad_af[4] = 200;
        let mut short = packet(0x41, true, false, &[0, 0, 1, 0xE0, 0, 0, 0x80, 0xC0]);
        short[3] = 0x30;
        let padding = packet(0x41, true, false, &[0, 0, 1, 0xBE, 0, 10]);
        let no_start = packet(0x41, true, false, &[0, 0, 2, 0xE0]);
        let mut huge_hdr = pes.clone();
        huge_hdr[8] = 250;
        let huge = packet(0x41, true, false, &huge_hdr);
        let mut noise = [0u8; TS_PACKET];
        for (i, b) in noise.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(151).wrapping_add(7);
        }
        noise[0] = SYNC;
        let got = scan_all(
            &mut t,
            1,
            1,
            &[bad_af, short, padding, no_start, huge, noise],
        );
        let short_start = got
            .iter()
            .find(|g| g.packet_offset == 188)
            .expect("short PES");
        assert_eq!((short_start.pts, short_start.dts), (NONE, NONE));
        let huge_start = got
            .iter()
            .find(|g| g.packet_offset == 4 * 188)
            .expect("huge PES");
        assert_eq!(
            huge_start.prev_es_bytes, NONE,
            "a padding PES ended the previous one"
        );
        assert_eq!(huge_start.pts, 1, "PTS still lies within the packet");
        for pos in 0..TS_PACKET {
            let mut p = good;
            p[pos] ^= 0xA5;
            p[0] = SYNC;
            scan_all(&mut t, 2, 1, &[p, good]);
        }
    }
    /// Proptest cases: `PROPTEST_CASES` if set (a long run), else `default`.
    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// What every `PesStart` from `data` must satisfy, whatever the bytes were.
    fn check_starts(data: &[u8], starts: &[PesStart]) {
        let mut last_offset = None;
        for p in starts {
            assert!(p.pid < 0x2000, "PID is 13 bits: {p:?}");
            assert!(p.pts == NONE || p.pts < 1 << 33, "PTS is 33 bits: {p:?}");
            assert!(p.dts == NONE || p.dts < 1 << 33, "DTS is 33 bits: {p:?}");
            assert!(
                p.dts == NONE || p.pts != NONE,
                "a DTS only with a PTS: {p:?}"
            );
            let at = p.packet_offset as usize;
            assert!(at < data.len() && at.is_multiple_of(TS_PACKET), "{p:?}");
            assert_eq!(data[at], SYNC);
            assert!(last_offset < Some(at), "one start per packet, in order");
            last_offset = Some(at);
        }
    }

    /// A stream of `frames` (pid, pts, es_len) as TS packets, each PES cut into packets.
    fn stream(frames: &[(u16, u64, usize)]) -> Vec<[u8; TS_PACKET]> {
        let mut pkts = Vec::new();
        for &(pid, pts, es_len) in frames {
            let mut pes = pes_header(0xE0, Some(pts), None, 0);
            pes.extend(std::iter::repeat_n(0x5A, es_len));
            let mut first = true;
            for piece in pes.chunks(184) {
                // A short last piece gets an adaptation field; keep the RAI off.
                pkts.push(packet(pid, first, false, piece));
                first = false;
            }
        }
        pkts
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases(4000)))]

        /// Arbitrary packets (sync byte forced, else nothing would be parsed): no panic,
        /// and what comes out is well-formed.
        #[test]
        fn any_packets_never_panic(
            pkts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), TS_PACKET), 1..8),
            pads in proptest::collection::vec(0u32..3, 1..4),
        ) {
            let mut t = PesTracker::default();
            for pad in pads {
                let mut data: Vec<u8> = pkts.concat();
                for p in data.chunks_exact_mut(TS_PACKET) {
                    p[0] = SYNC;
                }
                let mut out = Vec::new();
                t.scan(pad, 1, &data, |p| out.push(*p));
                check_starts(&data, &out);
            }
        }

        /// Any bytes at all, of any length: no panic (most are not TS and yield nothing).
        #[test]
        fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let mut out = Vec::new();
            PesTracker::default().scan(1, 1, &data, |p| out.push(*p));
            check_starts(&data, &out);
            prop_assert!(out.is_empty() || is_ts(&data));
        }

        /// A valid stream round-trips (every PTS, every previous PES's size); the same
        /// stream with bytes flipped never panics and stays well-formed.
        #[test]
        fn valid_streams_round_trip_and_survive_corruption(
            frames in proptest::collection::vec((0u16..4, 0u64..(1 << 33), 0usize..900), 1..12),
            flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..24),
            split in 0usize..20,
        ) {
            let frames: Vec<_> = frames.iter().map(|&(p, pts, n)| (0x100 + p, pts, n)).collect();
            let pkts = stream(&frames);
            let data: Vec<u8> = pkts.iter().flatten().copied().collect();
            // Delivered in two buffers, cut at a packet boundary.
            let cut = (split.min(pkts.len())) * TS_PACKET;
            let mut t = PesTracker::default();
            let mut out = Vec::new();
            for part in [&data[..cut], &data[cut..]] {
                t.scan(1, part.len() as u64, part, |p| out.push(*p));
            }
            prop_assert_eq!(out.len(), frames.len());
            for (i, (p, &(pid, pts, _))) in out.iter().zip(&frames).enumerate() {
                prop_assert_eq!((p.pid, p.pts, p.dts), (pid, pts, NONE));
                let before = frames[..i].iter().rev().find(|f| f.0 == pid);
                let expected = before.map_or(NONE, |f| f.2 as u64);
                prop_assert_eq!(p.prev_es_bytes, expected, "frame {}", i);
            }
            let mut bad = data.clone();
            for (at, x) in flips {
                let at = at % bad.len();
                bad[at] ^= x;
            }
            let mut out = Vec::new();
            PesTracker::default().scan(1, 1, &bad, |p| out.push(*p));
            check_starts(&bad, &out);
        }
    }

    /// Inputs a fuzzer found or that sit on an edge, kept as regression seeds.
    #[test]
    fn regression_seeds() {
        let seeds: [&[u8]; 4] = [
            // adaptation field of length 183 with no payload but PUSI set
            &[0x47, 0x40, 0x41, 0x20, 183],
            // adaptation field length 184: one past the packet
            &[0x47, 0x40, 0x41, 0x30, 184],
            // PES header whose data length points past the packet
            &[
                0x47, 0x40, 0x41, 0x10, 0, 0, 1, 0xE0, 0, 0, 0x80, 0xC0, 0xFF,
            ],
            // a PES start code cut after the stream id
            &[0x47, 0x40, 0x41, 0x10, 0, 0, 1, 0xE0],
        ];
        for seed in seeds {
            let mut p = [0xFFu8; TS_PACKET];
            p[..seed.len()].copy_from_slice(seed);
            let mut out = Vec::new();
            PesTracker::default().scan(1, 1, &p, |s| out.push(*s));
            check_starts(&p, &out);
        }
    }
}

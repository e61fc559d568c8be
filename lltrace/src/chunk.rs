//! The file header and the chunks (`docs/trace-format.md`), appended to a byte buffer.

use super::record::{Record, RECORD_SIZE};

/// Chunk type numbers.
pub mod kind {
    pub const INFO: u32 = 1;
    pub const PAD: u32 = 2;
    pub const THREAD: u32 = 3;
    pub const EVENTS: u32 = 4;
    pub const CAPS: u32 = 5;
    pub const CLOCK: u32 = 6;
    pub const DROPS: u32 = 7;
    pub const END: u32 = 8;
    pub const STATS: u32 = 9;
    pub const SEGMENT: u32 = 10;
    pub const LATENCY: u32 = 11;
}

/// The first 8 bytes of every trace file.
pub const MAGIC: &[u8; 8] = b"LLTRACE\0";
/// Format version written in the header.
pub const VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_SIZE: usize = 32;

/// The 32-byte file header.
pub fn header(pid: u32, start_mono_ns: u64) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[0..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    h[12..14].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
    h[16..20].copy_from_slice(&pid.to_le_bytes());
    h[24..32].copy_from_slice(&start_mono_ns.to_le_bytes());
    h
}

/// Appends one chunk to a byte buffer: type, length (patched by [`ChunkWriter::finish`]),
/// payload.
pub struct ChunkWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> ChunkWriter<'a> {
    /// Starts a chunk of type `ty`; the length is patched by [`ChunkWriter::finish`].
    pub fn begin(out: &'a mut Vec<u8>, ty: u32) -> Self {
        out.extend_from_slice(&ty.to_le_bytes());
        let start = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        ChunkWriter { out, start }
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A `u16` length followed by the UTF-8 bytes (cut at 65535 bytes on a char boundary).
    pub fn str(&mut self, s: &str) -> &mut Self {
        let mut n = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.out.extend_from_slice(&(n as u16).to_le_bytes());
        self.out.extend_from_slice(&s.as_bytes()[..n]);
        self
    }

    /// One 80-byte event record (in an `EVENTS` chunk).
    #[inline]
    pub fn record(&mut self, r: &Record) -> &mut Self {
        self.out.extend_from_slice(&r.to_bytes());
        self
    }

    /// Length of the payload written so far.
    pub fn payload_len(&self) -> usize {
        self.out.len() - self.start - 4
    }

    /// Patches the payload length.
    pub fn finish(self) {
        let len = self.payload_len() as u32;
        self.out[self.start..self.start + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Removes the chunk again (e.g. an `EVENTS` chunk that got no record).
    pub fn discard(self) {
        self.out.truncate(self.start - 4);
    }
}

/// Everything a `PAD` chunk says about a pad.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PadDesc {
    pub pad_id: u32,
    pub flags: u32,
    pub pipeline_id: u64,
    pub element: String,
    pub pad: String,
    pub factory: String,
    pub klass: String,
    pub peer_element: String,
    pub peer_pad: String,
    pub peer_factory: String,
    pub parent_path: String,
}

/// Pad flag bits of a `PAD` chunk.
pub mod pad_flags {
    pub const SRC: u32 = 1;
    pub const PEER_IS_SINK: u32 = 2;
    pub const GHOST_OR_PROXY: u32 = 4;
    pub const ELEMENT_IS_SOURCE: u32 = 8;
    pub const ELEMENT_IS_SINK: u32 = 16;
    /// The element pulls its input (a sink pad in pull mode, e.g. `wavparse` after
    /// `filesrc`): nothing upstream pushes, so its output is where the media starts.
    pub const ELEMENT_PULLS: u32 = 32;
}

/// Everything a `CLOCK` chunk says about a pipeline's clock.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClockDesc {
    pub pipeline_id: u64,
    pub mono_ns: u64,
    pub clock_ns: u64,
    pub base_time: u64,
    pub state: u32,
    pub flags: u32,
    pub pipeline: String,
    pub clock: String,
}

/// Flag bits of a `CLOCK` chunk.
pub mod clock_flags {
    /// The clock is a GstSystemClock on CLOCK_MONOTONIC (`clock_ns == mono_ns`).
    pub const SYSTEM_MONOTONIC: u32 = 1;
}

/// The fields of a segment event, as the `SEGMENT` chunk stores them.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentDesc {
    pub pad_id: u32,
    pub t_ns: u64,
    pub format: u32,
    pub flags: u32,
    pub rate: f64,
    pub applied_rate: f64,
    /// base, offset, start, stop, time, position, duration (NONE = all ones)
    pub values: [u64; 7],
}

/// Appends an `INFO` chunk of key/value pairs.
pub fn info<K: AsRef<str>, V: AsRef<str>>(out: &mut Vec<u8>, pairs: &[(K, V)]) {
    let mut c = ChunkWriter::begin(out, kind::INFO);
    for (k, v) in pairs {
        c.str(k.as_ref()).str(v.as_ref());
    }
    c.finish();
}

/// Appends a `PAD` chunk.
pub fn pad(out: &mut Vec<u8>, d: &PadDesc) {
    let mut c = ChunkWriter::begin(out, kind::PAD);
    c.u32(d.pad_id).u32(d.flags).u64(d.pipeline_id);
    for s in [
        &d.element,
        &d.pad,
        &d.factory,
        &d.klass,
        &d.peer_element,
        &d.peer_pad,
        &d.peer_factory,
        &d.parent_path,
    ] {
        c.str(s);
    }
    c.finish();
}

/// Appends a `THREAD` chunk.
pub fn thread(out: &mut Vec<u8>, idx: u32, tid: u32, name: &str) {
    let mut c = ChunkWriter::begin(out, kind::THREAD);
    c.u32(idx).u32(tid).str(name);
    c.finish();
}

/// Appends an `EVENTS` chunk holding `records`; nothing if there are none.
pub fn events(out: &mut Vec<u8>, records: &[Record]) {
    if records.is_empty() {
        return;
    }
    let mut c = ChunkWriter::begin(out, kind::EVENTS);
    for r in records {
        c.record(r);
    }
    c.finish();
}

/// Appends a `CAPS` chunk.
pub fn caps(out: &mut Vec<u8>, pad_id: u32, t_ns: u64, caps: &str) {
    let mut c = ChunkWriter::begin(out, kind::CAPS);
    c.u32(pad_id).u64(t_ns).str(caps);
    c.finish();
}

/// Appends a `CLOCK` chunk.
pub fn clock(out: &mut Vec<u8>, d: &ClockDesc) {
    let mut c = ChunkWriter::begin(out, kind::CLOCK);
    c.u64(d.pipeline_id)
        .u64(d.mono_ns)
        .u64(d.clock_ns)
        .u64(d.base_time);
    c.u32(d.state).u32(d.flags).str(&d.pipeline).str(&d.clock);
    c.finish();
}

/// Appends a `DROPS` chunk.
pub fn drops(out: &mut Vec<u8>, t_ns: u64, dropped: u64) {
    let mut c = ChunkWriter::begin(out, kind::DROPS);
    c.u64(t_ns).u64(dropped);
    c.finish();
}

/// Appends the `END` chunk.
pub fn end(out: &mut Vec<u8>, t_ns: u64, written: u64, dropped: u64) {
    let mut c = ChunkWriter::begin(out, kind::END);
    c.u64(t_ns).u64(written).u64(dropped);
    c.finish();
}

/// Appends a `STATS` chunk.
pub fn stats(out: &mut Vec<u8>, t_ns: u64, element: &str, factory: &str, json: &str) {
    let mut c = ChunkWriter::begin(out, kind::STATS);
    c.u64(t_ns).str(element).str(factory).str(json);
    c.finish();
}

/// Appends a `SEGMENT` chunk.
pub fn segment(out: &mut Vec<u8>, d: &SegmentDesc) {
    let mut c = ChunkWriter::begin(out, kind::SEGMENT);
    c.u32(d.pad_id).u64(d.t_ns).u32(d.format).u32(d.flags);
    c.f64(d.rate).f64(d.applied_rate);
    for v in d.values {
        c.u64(v);
    }
    c.finish();
}

/// Appends a `LATENCY` chunk: the latency a pipeline configured, seen on a pad.
pub fn latency(out: &mut Vec<u8>, pad_id: u32, t_ns: u64, latency_ns: u64) {
    let mut c = ChunkWriter::begin(out, kind::LATENCY);
    c.u32(pad_id).u64(t_ns).u64(latency_ns);
    c.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{self, hex};
    use crate::record::{kind as record_kind, NONE};

    /// Reads a chunk payload by hand.
    struct Cursor<'a>(&'a [u8]);

    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> &[u8] {
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            head
        }
        fn u16(&mut self) -> u16 {
            u16::from_le_bytes(self.take(2).try_into().unwrap())
        }
        fn u32(&mut self) -> u32 {
            u32::from_le_bytes(self.take(4).try_into().unwrap())
        }
        fn u64(&mut self) -> u64 {
            u64::from_le_bytes(self.take(8).try_into().unwrap())
        }
        fn f64(&mut self) -> f64 {
            f64::from_le_bytes(self.take(8).try_into().unwrap())
        }
        fn str(&mut self) -> String {
            let n = self.u16() as usize;
            String::from_utf8(self.take(n).to_vec()).unwrap()
        }
        fn done(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// Checks the chunk framing of `out` (one chunk of type `ty`) and the bytes of
    /// version 1; returns a cursor on the payload.
    fn framed<'a>(out: &'a [u8], ty: u32, expected_hex: &str) -> Cursor<'a> {
        assert_eq!(
            hex(out),
            expected_hex,
            "chunk {ty}: bytes differ from version 1"
        );
        let mut c = Cursor(out);
        assert_eq!(c.u32(), ty);
        assert_eq!(c.u32() as usize, out.len() - 8, "payload length");
        c
    }

    #[test]
    fn header_layout() {
        let h = header(0x01020304, 0x1122334455667788);
        assert_eq!(hex(&h), fixture::HEADER_HEX);
        let mut c = Cursor(&h);
        assert_eq!(c.take(8), b"LLTRACE\0");
        assert_eq!((c.u16(), c.u16(), c.u16(), c.u16()), (1, 32, 80, 0));
        assert_eq!((c.u32(), c.u32()), (0x01020304, 0));
        assert_eq!(c.u64(), 0x1122334455667788);
    }

    #[test]
    fn info_chunk() {
        let mut out = Vec::new();
        info(&mut out, &[("process", "sender"), ("k\u{e9}y", "")]);
        let mut c = framed(&out, kind::INFO, fixture::INFO_HEX);
        assert_eq!((c.str(), c.str()), ("process".into(), "sender".into()));
        assert_eq!((c.str(), c.str()), ("k\u{e9}y".into(), String::new()));
        assert!(c.done());
        // Owned values encode the same.
        let mut owned = Vec::new();
        info(
            &mut owned,
            &[
                ("process", "sender".to_string()),
                ("k\u{e9}y", String::new()),
            ],
        );
        assert_eq!(owned, out);
    }

    #[test]
    fn pad_chunk() {
        let mut out = Vec::new();
        let d = fixture::pad_desc();
        pad(&mut out, &d);
        let mut c = framed(&out, kind::PAD, fixture::PAD_HEX);
        assert_eq!((c.u32(), c.u32(), c.u64()), (7, 0x3f, 0x0102030405060708));
        let strings: Vec<String> = (0..8).map(|_| c.str()).collect();
        assert!(c.done());
        let expected = [
            &d.element,
            &d.pad,
            &d.factory,
            &d.klass,
            &d.peer_element,
            &d.peer_pad,
            &d.peer_factory,
            &d.parent_path,
        ];
        assert_eq!(strings.iter().collect::<Vec<_>>(), expected);
        let all = pad_flags::SRC
            | pad_flags::PEER_IS_SINK
            | pad_flags::GHOST_OR_PROXY
            | pad_flags::ELEMENT_IS_SOURCE
            | pad_flags::ELEMENT_IS_SINK
            | pad_flags::ELEMENT_PULLS;
        assert_eq!(all, 0x3f);
    }

    #[test]
    fn thread_chunk() {
        let mut out = Vec::new();
        thread(&mut out, 3, 4242, "audiotestsrc0:s");
        let mut c = framed(&out, kind::THREAD, fixture::THREAD_HEX);
        assert_eq!(
            (c.u32(), c.u32(), c.str()),
            (3, 4242, "audiotestsrc0:s".into())
        );
        assert!(c.done());
    }

    #[test]
    fn events_chunk() {
        let records = fixture::record_fixtures();
        let (push, eos) = (records[0].1, records[2].1);
        let mut out = Vec::new();
        events(&mut out, &[push, eos]);
        let mut c = framed(&out, kind::EVENTS, fixture::EVENTS_HEX);
        assert_eq!(c.take(80), push.to_bytes());
        assert_eq!(c.take(80), eos.to_bytes());
        assert!(c.done());
        let mut by_writer = Vec::new();
        let mut w = ChunkWriter::begin(&mut by_writer, kind::EVENTS);
        w.record(&push).record(&eos);
        w.finish();
        assert_eq!(by_writer, out);
        let mut none = vec![1, 2];
        events(&mut none, &[]);
        assert_eq!(none, [1, 2], "no records, no chunk");
        assert_eq!(eos.kind, record_kind::EOS);
    }

    #[test]
    fn caps_chunk() {
        let mut out = Vec::new();
        caps(&mut out, 2, 0x123456789, "audio/x-raw, rate=(int)48000");
        let mut c = framed(&out, kind::CAPS, fixture::CAPS_HEX);
        assert_eq!((c.u32(), c.u64()), (2, 0x123456789));
        assert_eq!(c.str(), "audio/x-raw, rate=(int)48000");
        assert!(c.done());
    }

    #[test]
    fn clock_chunk() {
        let mut out = Vec::new();
        clock(&mut out, &fixture::clock_desc());
        let mut c = framed(&out, kind::CLOCK, fixture::CLOCK_HEX);
        assert_eq!((c.u64(), c.u64(), c.u64(), c.u64()), (1, 1000, 2000, NONE));
        assert_eq!((c.u32(), c.u32()), (4, clock_flags::SYSTEM_MONOTONIC));
        assert_eq!(
            (c.str(), c.str()),
            ("pipeline0".into(), "GstSystemClock".into())
        );
        assert!(c.done());
    }

    #[test]
    fn drops_end_and_latency_chunks() {
        let mut out = Vec::new();
        drops(&mut out, 55, 66);
        let mut c = framed(&out, kind::DROPS, fixture::DROPS_HEX);
        assert_eq!((c.u64(), c.u64()), (55, 66));
        assert!(c.done());

        let mut out = Vec::new();
        end(&mut out, 77, 88, 99);
        let mut c = framed(&out, kind::END, fixture::END_HEX);
        assert_eq!((c.u64(), c.u64(), c.u64()), (77, 88, 99));
        assert!(c.done());

        let mut out = Vec::new();
        latency(&mut out, 5, 6, 20_000_000);
        let mut c = framed(&out, kind::LATENCY, fixture::LATENCY_HEX);
        assert_eq!((c.u32(), c.u64(), c.u64()), (5, 6, 20_000_000));
        assert!(c.done());
    }

    #[test]
    fn stats_chunk() {
        let mut out = Vec::new();
        stats(&mut out, 42, "fakesink0", "fakesink", "{\"rendered\":3}");
        let mut c = framed(&out, kind::STATS, fixture::STATS_HEX);
        assert_eq!(c.u64(), 42);
        assert_eq!((c.str(), c.str()), ("fakesink0".into(), "fakesink".into()));
        assert_eq!(c.str(), "{\"rendered\":3}");
        assert!(c.done());
    }

    #[test]
    fn segment_chunk() {
        let mut out = Vec::new();
        let d = fixture::segment_desc();
        segment(&mut out, &d);
        let mut c = framed(&out, kind::SEGMENT, fixture::SEGMENT_HEX);
        assert_eq!((c.u32(), c.u64(), c.u32(), c.u32()), (9, 123, 3, 0));
        assert_eq!((c.f64(), c.f64()), (1.0, -0.5));
        let values: Vec<u64> = (0..7).map(|_| c.u64()).collect();
        assert_eq!(values, d.values);
        assert!(c.done());
    }

    #[test]
    fn long_strings_are_cut_on_a_char_boundary() {
        let mut out = Vec::new();
        let s = "é".repeat(40000);
        ChunkWriter::begin(&mut out, kind::INFO).str(&s);
        let n = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!(n, 65534);
        assert!(std::str::from_utf8(&out[10..10 + n]).is_ok());
    }

    #[test]
    fn discarded_chunk_leaves_nothing() {
        let mut out = vec![1, 2, 3];
        ChunkWriter::begin(&mut out, kind::EVENTS).discard();
        assert_eq!(out, vec![1, 2, 3]);
    }
}

//! Encoding of the file header and of the chunks (`docs/trace-format.md`).

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

/// Format version written in the header.
pub const VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_SIZE: usize = 32;

/// The 32-byte file header.
pub fn header(pid: u32, start_mono_ns: u64) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[0..8].copy_from_slice(b"LLTRACE\0");
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(HEADER_SIZE as u16).to_le_bytes());
    h[12..14].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
    h[16..20].copy_from_slice(&pid.to_le_bytes());
    h[24..32].copy_from_slice(&start_mono_ns.to_le_bytes());
    h
}

/// Appends chunks to a byte buffer.
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

    pub fn record(&mut self, r: &Record) -> &mut Self {
        let mut b = [0u8; RECORD_SIZE];
        r.encode(&mut b);
        self.out.extend_from_slice(&b);
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

/// Appends an `INFO` chunk.
pub fn info(out: &mut Vec<u8>, pairs: &[(&str, String)]) {
    let mut c = ChunkWriter::begin(out, kind::INFO);
    for (k, v) in pairs {
        c.str(k).str(v);
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

/// Appends a `CAPS` chunk.
pub fn caps(out: &mut Vec<u8>, pad_id: u32, t_ns: u64, caps: &str) {
    let mut c = ChunkWriter::begin(out, kind::CAPS);
    c.u32(pad_id).u64(t_ns).str(caps);
    c.finish();
}

/// The fields of a segment event, as the `SEGMENT` chunk stores them.
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

/// Appends a `STATS` chunk.
pub fn stats(out: &mut Vec<u8>, t_ns: u64, element: &str, factory: &str, json: &str) {
    let mut c = ChunkWriter::begin(out, kind::STATS);
    c.u64(t_ns).str(element).str(factory).str(json);
    c.finish();
}

/// Appends the `END` chunk.
pub fn end(out: &mut Vec<u8>, t_ns: u64, written: u64, dropped: u64) {
    let mut c = ChunkWriter::begin(out, kind::END);
    c.u64(t_ns).u64(written).u64(dropped);
    c.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    #[test]
    fn header_layout() {
        let h = header(1234, 0x1122334455667788);
        assert_eq!(&h[0..8], b"LLTRACE\0");
        assert_eq!(u16::from_le_bytes([h[8], h[9]]), 1);
        assert_eq!(u16::from_le_bytes([h[10], h[11]]), 32);
        assert_eq!(u16::from_le_bytes([h[12], h[13]]), 80);
        assert_eq!(u32_at(&h, 16), 1234);
        assert_eq!(
            u64::from_le_bytes(h[24..32].try_into().unwrap()),
            0x1122334455667788
        );
    }

    #[test]
    fn thread_chunk_layout() {
        let mut out = Vec::new();
        thread(&mut out, 3, 4242, "src:é");
        assert_eq!(u32_at(&out, 0), kind::THREAD);
        assert_eq!(u32_at(&out, 4) as usize, out.len() - 8);
        assert_eq!(u32_at(&out, 8), 3);
        assert_eq!(u32_at(&out, 12), 4242);
        assert_eq!(u16::from_le_bytes([out[16], out[17]]), 6);
        assert_eq!(&out[18..], "src:é".as_bytes());
    }

    #[test]
    fn pad_chunk_has_eight_strings() {
        let mut out = Vec::new();
        let d = PadDesc {
            pad_id: 7,
            flags: pad_flags::SRC | pad_flags::PEER_IS_SINK,
            pipeline_id: 1,
            element: "rtpL16pay0".into(),
            pad: "src".into(),
            parent_path: "pipeline0".into(),
            ..PadDesc::default()
        };
        pad(&mut out, &d);
        let payload = &out[8..];
        assert_eq!(u32_at(payload, 0), 7);
        assert_eq!(u32_at(payload, 4), 3);
        let mut o = 16;
        let mut strings = Vec::new();
        while o < payload.len() {
            let n = u16::from_le_bytes([payload[o], payload[o + 1]]) as usize;
            strings.push(std::str::from_utf8(&payload[o + 2..o + 2 + n]).unwrap());
            o += 2 + n;
        }
        assert_eq!(strings.len(), 8);
        assert_eq!(strings[0], "rtpL16pay0");
        assert_eq!(strings[7], "pipeline0");
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

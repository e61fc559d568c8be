// Writer of latlab trace files (docs/trace-format.md, version 1): the subset the probe
// needs (header, INFO, THREAD, PAD, EVENTS, END).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"LLTRACE\0";
const VERSION: u16 = 1;
const HEADER_SIZE: u16 = 32;
pub const RECORD_SIZE: usize = 80;
const NONE_U64: u64 = u64::MAX;

const CHUNK_INFO: u32 = 1;
const CHUNK_PAD: u32 = 2;
const CHUNK_THREAD: u32 = 3;
const CHUNK_EVENTS: u32 = 4;
const CHUNK_END: u32 = 8;

pub const PAD_SRC: u32 = 1;
pub const PAD_PEER_IS_SINK: u32 = 2;
pub const PAD_ELEMENT_IS_SOURCE: u32 = 8;

pub const KIND_PUSH: u8 = 0;
pub const KIND_DONE: u8 = 1;
pub const FLAG_RTP: u8 = 1;
pub const FLAG_MARKER: u8 = 2;

/// RTP header fields of a packet (valid when the payload is a version-2 RTP packet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rtp {
    pub ssrc: u32,
    pub timestamp: u32,
    pub seq: u16,
    pub payload_type: u8,
    pub marker: bool,
}

impl Rtp {
    /// The RTP header of `packet`, if it is one.
    pub fn parse(packet: &[u8]) -> Option<Rtp> {
        if packet.len() < 12 || packet[0] >> 6 != 2 {
            return None;
        }
        Some(Rtp {
            seq: u16::from_be_bytes([packet[2], packet[3]]),
            timestamp: u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]),
            ssrc: u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]),
            payload_type: packet[1] & 0x7f,
            marker: packet[1] & 0x80 != 0,
        })
    }
}

/// One 80-byte event record.
pub fn record(out: &mut Vec<u8>, t_ns: u64, pad_id: u32, kind: u8, size: u32, rtp: Option<Rtp>) {
    let r = rtp.unwrap_or_default();
    let mut flags = 0u8;
    if rtp.is_some() {
        flags |= FLAG_RTP;
        if r.marker {
            flags |= FLAG_MARKER;
        }
    }
    out.extend_from_slice(&t_ns.to_le_bytes());
    for _ in 0..5 {
        out.extend_from_slice(&NONE_U64.to_le_bytes()); // pts, dts, duration, offsets
    }
    out.extend_from_slice(&pad_id.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // thread_idx
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // buffer flags
    out.extend_from_slice(&r.ssrc.to_le_bytes());
    out.extend_from_slice(&r.timestamp.to_le_bytes());
    out.extend_from_slice(&r.seq.to_le_bytes());
    out.push(r.payload_type);
    out.push(kind);
    out.push(flags);
    out.push(0);
    out.extend_from_slice(&0u16.to_le_bytes());
}

fn string(out: &mut Vec<u8>, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Description of the one pad the probe records.
pub struct PadInfo<'a> {
    pub pad_id: u32,
    pub flags: u32,
    pub element: &'a str,
    pub pad: &'a str,
    pub factory: &'a str,
    pub klass: &'a str,
    pub peer_element: &'a str,
    pub peer_pad: &'a str,
    pub path: &'a str,
}

/// A trace file being written.
pub struct TraceWriter {
    file: BufWriter<File>,
    events: u64,
}

impl TraceWriter {
    /// Create `path` and write the header.
    pub fn create(path: &Path, pid: u32, start_mono_ns: u64) -> io::Result<Self> {
        let mut file = BufWriter::new(File::create(path)?);
        let mut header = Vec::with_capacity(HEADER_SIZE as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&HEADER_SIZE.to_le_bytes());
        header.extend_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
        header.extend_from_slice(&0u16.to_le_bytes());
        header.extend_from_slice(&pid.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        header.extend_from_slice(&start_mono_ns.to_le_bytes());
        file.write_all(&header)?;
        Ok(Self { file, events: 0 })
    }

    fn chunk(&mut self, kind: u32, payload: &[u8]) -> io::Result<()> {
        self.file.write_all(&kind.to_le_bytes())?;
        self.file.write_all(&(payload.len() as u32).to_le_bytes())?;
        self.file.write_all(payload)
    }

    /// INFO chunk of key/value pairs.
    pub fn info(&mut self, pairs: &[(&str, &str)]) -> io::Result<()> {
        let mut payload = Vec::new();
        for (key, value) in pairs {
            string(&mut payload, key);
            string(&mut payload, value);
        }
        self.chunk(CHUNK_INFO, &payload)
    }

    /// THREAD chunk.
    pub fn thread(&mut self, idx: u32, tid: u32, name: &str) -> io::Result<()> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&idx.to_le_bytes());
        payload.extend_from_slice(&tid.to_le_bytes());
        string(&mut payload, name);
        self.chunk(CHUNK_THREAD, &payload)
    }

    /// PAD chunk.
    pub fn pad(&mut self, pad: &PadInfo) -> io::Result<()> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&pad.pad_id.to_le_bytes());
        payload.extend_from_slice(&pad.flags.to_le_bytes());
        payload.extend_from_slice(&0u64.to_le_bytes()); // no pipeline
        for text in [
            pad.element,
            pad.pad,
            pad.factory,
            pad.klass,
            pad.peer_element,
            pad.peer_pad,
            pad.factory,
            pad.path,
        ] {
            string(&mut payload, text);
        }
        self.chunk(CHUNK_PAD, &payload)
    }

    /// EVENTS chunk from whole records; flushed to the file.
    pub fn events(&mut self, records: &[u8]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.chunk(CHUNK_EVENTS, records)?;
        self.events += (records.len() / RECORD_SIZE) as u64;
        self.file.flush()
    }

    /// END chunk, then close.
    pub fn finish(mut self, t_ns: u64) -> io::Result<()> {
        let mut payload = Vec::with_capacity(24);
        payload.extend_from_slice(&t_ns.to_le_bytes());
        payload.extend_from_slice(&self.events.to_le_bytes());
        payload.extend_from_slice(&0u64.to_le_bytes());
        self.chunk(CHUNK_END, &payload)?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rtp_header() {
        let packet = [
            0x80, 0xe0, 0x12, 0x34, 0, 0, 0x01, 0x00, 0xde, 0xad, 0xbe, 0xef, 9,
        ];
        let rtp = Rtp::parse(&packet).unwrap();
        assert_eq!(rtp.seq, 0x1234);
        assert_eq!(rtp.timestamp, 256);
        assert_eq!(rtp.ssrc, 0xdeadbeef);
        assert_eq!(rtp.payload_type, 96);
        assert!(rtp.marker);
        assert_eq!(Rtp::parse(&packet[..11]), None);
        assert_eq!(Rtp::parse(&[0u8; 12]), None);
    }

    #[test]
    fn record_is_80_bytes() {
        let mut out = Vec::new();
        record(&mut out, 5, 1, KIND_DONE, 100, Some(Rtp::default()));
        assert_eq!(out.len(), RECORD_SIZE);
        assert_eq!(out[75], KIND_DONE);
        assert_eq!(out[76], FLAG_RTP);
    }
}

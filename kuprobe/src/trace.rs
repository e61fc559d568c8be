// The probe's latlab trace file (docs/trace-format.md): header, INFO, THREAD, PAD,
// EVENTS and END, encoded by the shared `lltrace` crate.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use lltrace::chunk::{self, PadDesc};
use lltrace::{Record, RtpHeader};

/// The one pad the probe records on, and the one thread.
pub const PAD_ID: u32 = 1;
pub const THREAD_IDX: u32 = 1;

/// The record of one packet at `t_ns`: `push` at the kernel's receive time, `done` at
/// the application's read; the RTP fields when the payload is RTP.
pub fn packet_record(t_ns: u64, kind: u8, size: u32, rtp: Option<&RtpHeader>) -> Record {
    let mut r = Record::empty(t_ns, PAD_ID, THREAD_IDX, kind);
    r.size = size;
    if let Some(h) = rtp {
        r.set_rtp(h);
    }
    r
}

/// The pad `kernel:src` (a source element) feeding the sink element `app`.
pub fn probe_pad() -> PadDesc {
    PadDesc {
        pad_id: PAD_ID,
        flags: chunk::pad_flags::SRC
            | chunk::pad_flags::PEER_IS_SINK
            | chunk::pad_flags::ELEMENT_IS_SOURCE,
        pipeline_id: 0,
        element: "kernel".into(),
        pad: "src".into(),
        factory: "kuprobe".into(),
        klass: "Source/Network".into(),
        peer_element: "app".into(),
        peer_pad: "sink".into(),
        peer_factory: "kuprobe".into(),
        parent_path: "kuprobe".into(),
    }
}

/// A trace file being written.
pub struct TraceWriter {
    file: BufWriter<File>,
    buf: Vec<u8>,
    events: u64,
}

impl TraceWriter {
    /// Create `path` and write the header.
    pub fn create(path: &Path, pid: u32, start_mono_ns: u64) -> io::Result<Self> {
        let mut file = BufWriter::new(File::create(path)?);
        file.write_all(&chunk::header(pid, start_mono_ns))?;
        Ok(Self {
            file,
            buf: Vec::new(),
            events: 0,
        })
    }

    /// Writes what `encode` appends to the chunk buffer.
    fn put(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.buf.clear();
        encode(&mut self.buf);
        self.file.write_all(&self.buf)
    }

    /// INFO chunk of key/value pairs.
    pub fn info(&mut self, pairs: &[(&str, &str)]) -> io::Result<()> {
        self.put(|out| chunk::info(out, pairs))
    }

    /// THREAD chunk.
    pub fn thread(&mut self, idx: u32, tid: u32, name: &str) -> io::Result<()> {
        self.put(|out| chunk::thread(out, idx, tid, name))
    }

    /// PAD chunk.
    pub fn pad(&mut self, pad: &PadDesc) -> io::Result<()> {
        self.put(|out| chunk::pad(out, pad))
    }

    /// EVENTS chunk of `records` (none if empty); flushed to the file.
    pub fn events(&mut self, records: &[Record]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.put(|out| chunk::events(out, records))?;
        self.events += records.len() as u64;
        self.file.flush()
    }

    /// END chunk, then close.
    pub fn finish(mut self, t_ns: u64) -> io::Result<()> {
        let written = self.events;
        self.put(|out| chunk::end(out, t_ns, written, 0))?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lltrace::kind;

    /// What the probe's own encoder wrote before the shared crate (trace format
    /// version 1): two packet records, then the whole file below.
    const RECORDS_HEX: &str = concat!(
        "e803000000000000ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "ffffffffffffffff0100000001000000cc00000000000000cdab3412e00100000700600003000000",
        "d007000000000000ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "ffffffffffffffff0100000001000000070000000000000000000000000000000000000100000000",
    );
    const FILE_HEX: &str = concat!(
        "4c4c5452414345000100200050000000e11000000000000040420f0000000000010000001a000000",
        "070070726f6365737302006b750800686f73746e616d650100680300000011000000010000006300",
        "000007006b7570726f62650200000053000000010000000b000000000000000000000006006b6572",
        "6e656c030073726307006b7570726f62650e00536f757263652f4e6574776f726b03006170700400",
        "73696e6b07006b7570726f626507006b7570726f626504000000a0000000e803000000000000ffff",
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0100",
        "000001000000cc00000000000000cdab3412e00100000700600003000000d007000000000000ffff",
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0100",
        "0000010000000700000000000000000000000000000000000001000000000800000018000000404b",
        "4c000000000002000000000000000000000000000000",
    );

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn records() -> [Record; 2] {
        let rtp = RtpHeader {
            ssrc: 0x1234abcd,
            timestamp: 480,
            seq: 7,
            payload_type: 96,
            marker: true,
        };
        [
            packet_record(1000, kind::PUSH, 204, Some(&rtp)),
            packet_record(2000, kind::DONE, 7, None),
        ]
    }

    #[test]
    fn records_are_the_version_1_bytes() {
        let bytes: Vec<u8> = records().iter().flat_map(|r| r.to_bytes()).collect();
        assert_eq!(hex(&bytes), RECORDS_HEX);
    }

    #[test]
    fn file_is_the_version_1_bytes() {
        let path = std::env::temp_dir().join(format!("kuprobe-{}.lltrace", std::process::id()));
        let mut w = TraceWriter::create(&path, 4321, 1_000_000).unwrap();
        w.info(&[("process", "ku"), ("hostname", "h")]).unwrap();
        w.thread(THREAD_IDX, 99, "kuprobe").unwrap();
        w.pad(&probe_pad()).unwrap();
        w.events(&records()).unwrap();
        w.events(&[]).unwrap();
        w.finish(5_000_000).unwrap();
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(hex(&data), FILE_HEX);
    }
}

//! The packet log (`.lllink`, docs/link-log-format.md): a header, then one fixed
//! 64-byte little-endian record per packet copy, written by its own thread.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lltrace::Spsc;

pub const MAGIC: &[u8; 8] = b"LLLINK\0\0";
pub const VERSION: u16 = 1;
pub const RECORD_SIZE: usize = 64;
pub const FIXED_HEADER: usize = 40;

pub const VERDICT_DELIVERED: u8 = 0;
pub const VERDICT_LOSS: u8 = 1;
pub const VERDICT_QUEUE: u8 = 2;
pub const VERDICT_DUPLICATE: u8 = 3;
pub const VERDICT_UNSENT: u8 = 4;

pub const FLAG_RTP: u8 = 1;
pub const FLAG_RTP_MARKER: u8 = 2;
pub const FLAG_REORDERED: u8 = 4;
pub const FLAG_TRUNCATED: u8 = 8;
pub const FLAG_POOL_FULL: u8 = 16;
pub const FLAG_PASSTHROUGH: u8 = 32;
pub const FLAG_SEND_FAILED: u8 = 64;
pub const FLAG_COPY: u8 = 128;

/// Payload flags (record offset 62): the UDP payload is MPEG-TS (plain or after an SRT header).
pub const PAYLOAD_TS: u16 = 1;
/// A TS packet of the payload starts a PES with a PTS (its PID and PTS are in the RTP fields).
pub const PAYLOAD_PES_START: u16 = 2;
/// The UDP payload is an SRT data packet.
pub const PAYLOAD_SRT_DATA: u16 = 4;
/// The SRT data packet is a retransmission (R flag).
pub const PAYLOAD_SRT_REXMIT: u16 = 8;
/// The SRT payload is encrypted (KK non-zero): its TS is not parsed.
pub const PAYLOAD_SRT_ENCRYPTED: u16 = 16;

/// Header flag: the emulator stopped cleanly and wrote every record it had.
pub const HEADER_CLOSED: u32 = 1;

/// One packet copy's fate. Encoded field by field (see [`Record::encode`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    pub arrival_ns: u64,
    pub scheduled_ns: u64,
    pub released_ns: u64,
    pub size: u32,
    pub direction: u8,
    pub verdict: u8,
    pub ip_proto: u8,
    pub flags: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub src_ip: u32,
    pub dst_ip: u32,
    pub rtp_ssrc: u32,
    pub rtp_seq: u16,
    pub rtp_pt: u8,
    /// The RTP header's length (fixed part, CSRCs, extension) in 32-bit words; 0 when
    /// the packet is not RTP or the header does not fit the packet.
    pub rtp_header_words: u8,
    pub rtp_ts: u32,
    pub packet_id: u32,
    pub ethertype: u16,
    pub payload_flags: u16,
}

impl Record {
    /// The 64-byte little-endian encoding.
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        b[0..8].copy_from_slice(&self.arrival_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.scheduled_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.released_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.size.to_le_bytes());
        b[28] = self.direction;
        b[29] = self.verdict;
        b[30] = self.ip_proto;
        b[31] = self.flags;
        b[32..34].copy_from_slice(&self.src_port.to_le_bytes());
        b[34..36].copy_from_slice(&self.dst_port.to_le_bytes());
        b[36..40].copy_from_slice(&self.src_ip.to_le_bytes());
        b[40..44].copy_from_slice(&self.dst_ip.to_le_bytes());
        b[44..48].copy_from_slice(&self.rtp_ssrc.to_le_bytes());
        b[48..50].copy_from_slice(&self.rtp_seq.to_le_bytes());
        b[50] = self.rtp_pt;
        b[51] = self.rtp_header_words;
        b[52..56].copy_from_slice(&self.rtp_ts.to_le_bytes());
        b[56..60].copy_from_slice(&self.packet_id.to_le_bytes());
        b[60..62].copy_from_slice(&self.ethertype.to_le_bytes());
        b[62..64].copy_from_slice(&self.payload_flags.to_le_bytes());
        b
    }
}

/// Records waiting for the writer: one ring per producing thread.
pub struct LogRings {
    pub rings: Vec<Arc<Spsc<Record>>>,
    pub lost: AtomicU64,
}

impl LogRings {
    /// Queue a record from the thread owning ring `i`; counted as lost when full.
    pub fn put(&self, i: usize, rec: Record) {
        if self.rings[i].push(rec).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Write the header: fixed part, then `info` (JSON text), padded to a 64-byte boundary.
pub fn write_header(file: &mut File, start_ns: u64, info: &str) -> std::io::Result<()> {
    let data_offset = (FIXED_HEADER + info.len()).div_ceil(RECORD_SIZE) * RECORD_SIZE;
    let mut h = vec![0u8; data_offset];
    h[0..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(RECORD_SIZE as u16).to_le_bytes());
    h[12..16].copy_from_slice(&(data_offset as u32).to_le_bytes());
    h[16..24].copy_from_slice(&start_ns.to_le_bytes());
    // 24..32 records lost, 32..36 flags: filled in at the end.
    h[36..40].copy_from_slice(&(info.len() as u32).to_le_bytes());
    h[FIXED_HEADER..FIXED_HEADER + info.len()].copy_from_slice(info.as_bytes());
    file.write_all(&h)
}

/// The writer thread: drains the rings every 10 ms, flushes at least every 50 ms,
/// and when `done` is set (every producer has finished) writes the rest and closes
/// the header with the count of lost records.
pub fn writer(file: File, rings: Arc<LogRings>, done: Arc<AtomicBool>) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut since_flush = 0;
    loop {
        let finished = done.load(Ordering::Acquire);
        for ring in &rings.rings {
            while let Some(rec) = ring.pop() {
                out.write_all(&rec.encode())?;
            }
        }
        if finished {
            break;
        }
        since_flush += 1;
        if since_flush >= 5 {
            out.flush()?;
            since_flush = 0;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    out.flush()?;
    let mut file = out.into_inner().map_err(|e| e.into_error())?;
    file.seek(SeekFrom::Start(24))?;
    file.write_all(&rings.lost.load(Ordering::Relaxed).to_le_bytes())?;
    file.write_all(&HEADER_CLOSED.to_le_bytes())?;
    file.sync_all()
}

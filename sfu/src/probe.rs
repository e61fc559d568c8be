//! White-box probes (`--trace FILE`): the ingress of every RTP packet and the egress of
//! every copy forwarded, in latlab's trace format (`docs/trace-format.md`, `push` on
//! `ingress`, kind `fwd` on `egress`).
//!
//! The loop thread fills a preallocated lock-free ring (`lltrace::Spsc`): no lock, no
//! allocation, no text, no I/O per packet; a full ring drops the record and counts it.
//! A writer thread drains the ring every 10 ms into the file, and writes the pad of each
//! subscriber when the loop announces it (a join: signalling, not the packet path).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use lltrace::chunk::{self, PadDesc};
use lltrace::clock::{monotonic_ns, realtime_ns};
use lltrace::{Record, Spsc};

/// Records the ring holds: about 6 s of 10 000 packets a second.
const RING: usize = 1 << 16;
const DRAIN_EVERY: Duration = Duration::from_millis(10);
/// The loop thread's index in the THREAD chunk.
pub const THREAD_IDX: u32 = 1;
/// The ingress pad.
pub const INGRESS_PAD: u32 = 1;

enum Control {
    Pad(PadDesc),
}

/// The loop thread's side of the probes.
pub struct Probes {
    ring: Arc<Spsc<Record>>,
    dropped: Arc<AtomicU64>,
    control: mpsc::Sender<Control>,
    stop: Arc<AtomicBool>,
    writer: Option<thread::JoinHandle<Result<(), String>>>,
    next_pad: u32,
    path: PathBuf,
}

fn pad_desc(pad_id: u32, element: &str, pad: &str) -> PadDesc {
    PadDesc {
        pad_id,
        flags: chunk::pad_flags::SRC,
        pipeline_id: 0,
        element: element.into(),
        pad: pad.into(),
        factory: "latlab-sfu".into(),
        klass: "Network/SFU".into(),
        peer_element: String::new(),
        peer_pad: String::new(),
        peer_factory: String::new(),
        parent_path: "latlab-sfu".into(),
    }
}

impl Probes {
    /// Creates the trace (header, INFO, THREAD, the ingress PAD) and starts its writer.
    pub fn start(path: &Path, process: &str, loop_tid: u32) -> Result<Probes, String> {
        let name = |e: std::io::Error| format!("--trace {}: {e}", path.display());
        let file = File::create(path).map_err(name)?;
        let mut out = BufWriter::new(file);
        let start = monotonic_ns();
        let (rt, mono) = (realtime_ns().to_string(), monotonic_ns().to_string());
        let mut buf = chunk::header(std::process::id(), start).to_vec();
        let cmdline: Vec<String> = std::env::args().collect();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        chunk::info(
            &mut buf,
            &[
                ("process", process),
                ("hostname", hostname.trim()),
                (
                    "tracer_version",
                    concat!("latlab-sfu ", env!("CARGO_PKG_VERSION")),
                ),
                ("cmdline", &cmdline.join(" ")),
                ("realtime_ns", &rt),
                ("monotonic_ns", &mono),
                ("kind", "sfu"),
            ],
        );
        chunk::thread(&mut buf, THREAD_IDX, loop_tid, "latlab-sfu");
        chunk::pad(&mut buf, &pad_desc(INGRESS_PAD, "ingress", ""));
        out.write_all(&buf).map_err(name)?;
        out.flush().map_err(name)?;

        let ring = Arc::new(Spsc::new(RING));
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (control, inbox) = mpsc::channel();
        let writer = {
            let (ring, dropped, stop) = (ring.clone(), dropped.clone(), stop.clone());
            let shown = path.display().to_string();
            thread::Builder::new()
                .name("sfu-trace".into())
                .spawn(move || write_loop(out, &ring, &dropped, &stop, inbox, &shown))
                .map_err(|e| format!("trace writer thread: {e}"))?
        };
        Ok(Probes {
            ring,
            dropped,
            control,
            stop,
            writer: Some(writer),
            next_pad: INGRESS_PAD + 1,
            path: path.to_path_buf(),
        })
    }

    /// Describes a new subscriber leg's pad (`egress:NAME`); its id.
    pub fn add_egress(&mut self, name: &str) -> u32 {
        let id = self.next_pad;
        self.next_pad += 1;
        let _ = self
            .control
            .send(Control::Pad(pad_desc(id, "egress", name)));
        id
    }

    /// Records one event: never blocks, allocates or locks; a full ring drops it.
    #[inline]
    pub fn record(&self, r: Record) {
        if self.ring.push(r).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes what is left and closes the trace (END chunk); the records dropped.
    pub fn finish(mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Release);
        let writer = self.writer.take().expect("started");
        writer
            .join()
            .map_err(|_| format!("{}: trace writer panicked", self.path.display()))??;
        Ok(self.dropped.load(Ordering::Relaxed))
    }
}

fn write_loop(
    mut out: BufWriter<File>,
    ring: &Spsc<Record>,
    dropped: &AtomicU64,
    stop: &AtomicBool,
    inbox: mpsc::Receiver<Control>,
    path: &str,
) -> Result<(), String> {
    let mut records: Vec<Record> = Vec::with_capacity(RING);
    let mut buf: Vec<u8> = Vec::with_capacity(RING * lltrace::RECORD_SIZE + 64);
    let mut written = 0u64;
    let mut last_dropped = 0u64;
    let err = |e: std::io::Error| format!("{path}: {e}");
    loop {
        let stopping = stop.load(Ordering::Acquire);
        buf.clear();
        // Pads before the events that may reference them.
        while let Ok(Control::Pad(pad)) = inbox.try_recv() {
            chunk::pad(&mut buf, &pad);
        }
        records.clear();
        ring.drain(|r| records.push(*r));
        chunk::events(&mut buf, &records);
        written += records.len() as u64;
        let d = dropped.load(Ordering::Relaxed);
        if d != last_dropped {
            chunk::drops(&mut buf, monotonic_ns(), d);
            last_dropped = d;
        }
        if stopping {
            chunk::end(&mut buf, monotonic_ns(), written, d);
        }
        if !buf.is_empty() {
            out.write_all(&buf).map_err(err)?;
            out.flush().map_err(err)?;
        }
        if stopping {
            return Ok(());
        }
        thread::sleep(DRAIN_EVERY);
    }
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC from a paired reading (realtime between two
/// monotonic reads at most 2 µs apart), for moving kernel receive stamps onto
/// CLOCK_MONOTONIC; `None` when every try was preempted.
pub fn realtime_offset() -> Option<i64> {
    for _ in 0..4 {
        let before = monotonic_ns();
        let rt = realtime_ns();
        let after = monotonic_ns();
        if after - before <= 2_000 {
            return Some(rt as i64 - ((before / 2 + after / 2) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use lltrace::{kind, FwdSource, RtpHeader};

    #[test]
    fn writes_pads_events_and_end() {
        let path = std::env::temp_dir().join(format!("sfu-probe-{}.lltrace", std::process::id()));
        let mut p = Probes::start(&path, "sfu", 42).unwrap();
        let leg = p.add_egress("bob");
        let h = RtpHeader {
            ssrc: 7,
            timestamp: 9,
            seq: 3,
            payload_type: 111,
            marker: false,
        };
        let mut ingress = Record::empty(100, INGRESS_PAD, THREAD_IDX, kind::PUSH);
        ingress.set_rtp(&h);
        p.record(ingress);
        let src = FwdSource {
            recv_ns: 100,
            kernel_ns: 90,
            ssrc: 7,
            timestamp: 9,
            seq: 3,
        };
        p.record(Record::fwd(
            150,
            leg,
            THREAD_IDX,
            120,
            &RtpHeader { ssrc: 8, ..h },
            &src,
        ));
        assert_eq!(p.finish().unwrap(), 0);
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut at = chunk::HEADER_SIZE;
        let mut types = Vec::new();
        while at < data.len() {
            let ty = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            let len = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap()) as usize;
            types.push(ty);
            at += 8 + len;
        }
        assert_eq!(at, data.len());
        assert_eq!(types.first(), Some(&chunk::kind::INFO));
        assert_eq!(types.last(), Some(&chunk::kind::END));
        assert_eq!(types.iter().filter(|&&t| t == chunk::kind::PAD).count(), 2);
        assert!(types.contains(&chunk::kind::EVENTS));
    }

    #[test]
    fn paired_clock_offset_is_near_realtime() {
        let off = realtime_offset().unwrap();
        let now = realtime_ns() as i64 - monotonic_ns() as i64;
        assert!((off - now).abs() < 1_000_000);
    }
}

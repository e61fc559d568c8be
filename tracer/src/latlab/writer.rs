//! The writer thread: drains the rings, stringifies, writes chunks.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use gst::prelude::*;

use lltrace::chunk::{self, ChunkWriter, ClockDesc, PadDesc};
use lltrace::clock::{monotonic_ns, realtime_ns};

use super::guard;
use super::recorder::{ClockSample, Note, Recorder};
use super::signals;
use super::stats::StatsElements;
use super::CAT;

/// Normal pause between two cycles.
const CYCLE_MS: i32 = 10;
/// Pause when a ring was more than a quarter full at the last cycle.
const BUSY_CYCLE_MS: i32 = 1;
/// Interval of the periodic `CLOCK` chunks.
const CLOCK_INTERVAL_NS: u64 = 1_000_000_000;

/// Cycles (about 10 ms each) a pad's description waits for the pad to have an
/// element and a peer: a demuxer pushes events on a new pad before adding it.
const PAD_DESCRIBE_WAIT_CYCLES: u32 = 200;

/// Owns the trace file; runs on its own thread.
pub struct Writer {
    file: File,
    buf: Vec<u8>,
    described_threads: HashSet<u32>,
    written: u64,
    last_drops: u64,
    last_clock_ns: u64,
    /// Interval of the `STATS` chunks, 0 = none.
    stats_interval_ns: u64,
    last_stats_ns: u64,
    stats: StatsElements,
    /// Pads seen without an element or a peer yet: (id, pad, cycles waited).
    deferred_pads: Vec<(u32, gst::Pad, u32)>,
    finishing: bool,
    failed: bool,
}

impl Writer {
    /// Creates the file (and its directory), writes the header and `INFO`;
    /// `STATS` chunks follow every `stats_interval_ms` (0: none).
    pub fn open(path: &Path, process: &str, pid: u32, stats_interval_ms: u64) -> io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = File::create(path)?;
        let start = monotonic_ns();
        let mut buf = chunk::header(pid, start).to_vec();
        chunk::info(&mut buf, &info_pairs(process));
        file.write_all(&buf)?;
        Ok(Writer {
            file,
            buf,
            described_threads: HashSet::new(),
            written: 0,
            last_drops: 0,
            last_clock_ns: start,
            stats_interval_ns: stats_interval_ms.saturating_mul(1_000_000),
            last_stats_ns: start,
            stats: StatsElements::default(),
            deferred_pads: Vec::new(),
            finishing: false,
            failed: false,
        })
    }

    /// Writer loop: a cycle every ~10 ms until shutdown or a handled signal.
    pub fn run(mut self, rec: &Recorder) {
        let mut busy = false;
        loop {
            let signal = rec.pipe.wait(if busy { BUSY_CYCLE_MS } else { CYCLE_MS });
            if signal.is_some() {
                rec.stop.store(true, Ordering::SeqCst);
            }
            let stop = rec.stop.load(Ordering::SeqCst);
            busy = self.cycle(rec);
            rec.cycles.fetch_add(1, Ordering::AcqRel);
            if stop {
                self.finish(rec);
                rec.finished.store(true, Ordering::Release);
                if let Some(sig) = signal {
                    signals::reraise(sig);
                }
                return;
            }
        }
    }

    /// One cycle; returns whether a ring was busy (more than a quarter full).
    fn cycle(&mut self, rec: &Recorder) -> bool {
        self.buf.clear();
        self.write_pads(rec);
        self.write_notes(rec);
        self.write_periodic_clocks(rec);
        self.write_periodic_stats();
        let busy = self.write_events(rec);
        self.write_drops(rec);
        self.flush();
        busy
    }

    /// Last cycle and the `END` chunk.
    fn finish(&mut self, rec: &Recorder) {
        self.finishing = true;
        self.cycle(rec);
        self.buf.clear();
        if let Some(fault) = guard::fault_text() {
            chunk::info(&mut self.buf, &[("tracer_fault", fault)]);
        }
        let dropped = rec.dropped.load(Ordering::Relaxed);
        chunk::end(&mut self.buf, monotonic_ns(), self.written, dropped);
        self.flush();
        gst::info!(
            CAT,
            "trace closed: {} events written, {dropped} dropped",
            self.written
        );
    }

    fn flush(&mut self) {
        if self.failed || self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            gst::error!(CAT, "cannot write the trace, recording stops: {e}");
            self.failed = true;
        }
    }

    /// Describes the pads seen since the last cycle, each once it is in an element
    /// and linked (or once it waited long enough, or at the end).
    fn write_pads(&mut self, rec: &Recorder) {
        let mut ready = Vec::new();
        let seen = std::mem::take(&mut self.deferred_pads).into_iter().chain(
            rec.take_pending_pads()
                .into_iter()
                .map(|(id, pad)| (id, pad, 0)),
        );
        for (id, pad, waited) in seen {
            let placed = owning_element(&pad).is_some() && pad.peer().is_some();
            if placed || self.finishing || waited >= PAD_DESCRIBE_WAIT_CYCLES {
                ready.push((id, pad));
            } else {
                self.deferred_pads.push((id, pad, waited + 1));
            }
        }
        for (id, pad) in &ready {
            chunk::pad(&mut self.buf, &describe_pad(rec, *id, pad));
            if self.stats_interval_ns > 0 {
                let peer = pad.peer();
                for element in [Some(pad), peer.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter_map(owning_element)
                {
                    self.stats.add(&element);
                }
            }
        }
    }

    /// Every stats interval, a `STATS` chunk per element with a `stats` property
    /// (those seen through the pads that carried data, and their peers).
    fn write_periodic_stats(&mut self) {
        let now = monotonic_ns();
        if self.stats_interval_ns == 0
            || now.saturating_sub(self.last_stats_ns) < self.stats_interval_ns
        {
            return;
        }
        self.last_stats_ns = now;
        for r in self.stats.read() {
            chunk::stats(&mut self.buf, r.t_ns, &r.element, &r.factory, &r.json);
        }
    }

    fn write_notes(&mut self, rec: &Recorder) {
        for note in rec.take_notes() {
            match note {
                Note::Caps { pad_id, t_ns, caps } => {
                    chunk::caps(&mut self.buf, pad_id, t_ns, &caps.to_string())
                }
                Note::Clock(sample) => chunk::clock(&mut self.buf, &describe_clock(&sample)),
                Note::Segment {
                    pad_id,
                    t_ns,
                    segment,
                } => chunk::segment(&mut self.buf, &describe_segment(pad_id, t_ns, &segment)),
                Note::Latency {
                    pad_id,
                    t_ns,
                    latency_ns,
                } => chunk::latency(&mut self.buf, pad_id, t_ns, latency_ns),
            }
        }
    }

    /// Once a second, a `CLOCK` chunk per live pipeline that is running with a clock.
    fn write_periodic_clocks(&mut self, rec: &Recorder) {
        let now = monotonic_ns();
        if now.saturating_sub(self.last_clock_ns) < CLOCK_INTERVAL_NS {
            return;
        }
        self.last_clock_ns = now;
        // An application's handler that was removed again (GLib restores the
        // default disposition) leaves the signal to us once more.
        rec.pipe.install_signal_handlers();
        for (id, pipeline) in rec.live_pipelines() {
            let state = pipeline.current_state();
            if state < gst::State::Paused {
                continue;
            }
            let sample = ClockSample::take(id, &pipeline, state);
            if sample.clock.is_some() {
                chunk::clock(&mut self.buf, &describe_clock(&sample));
            }
        }
    }

    /// `THREAD` chunks for new threads, then one `EVENTS` chunk with every
    /// ring's records; frees the slots of threads that exited.
    fn write_events(&mut self, rec: &Recorder) -> bool {
        let threads = rec.threads();
        for t in &threads {
            if self.described_threads.insert(t.idx) {
                chunk::thread(&mut self.buf, t.idx, t.tid, &thread_name(t.tid, &t.name));
            }
        }
        let mut busy = false;
        let mut exited = Vec::new();
        let mut events = ChunkWriter::begin(&mut self.buf, chunk::kind::EVENTS);
        for t in &threads {
            let alive = t.alive.load(Ordering::Acquire);
            let n = t.ring.drain(|r| {
                events.record(r);
            });
            self.written += n as u64;
            busy |= n > t.ring.capacity() / 4;
            if !alive {
                exited.push(t.idx);
            }
        }
        if events.payload_len() == 0 {
            events.discard();
        } else {
            events.finish();
        }
        if !exited.is_empty() {
            rec.remove_threads(&exited);
        }
        busy
    }

    fn write_drops(&mut self, rec: &Recorder) {
        let dropped = rec.dropped.load(Ordering::Relaxed);
        if dropped != self.last_drops {
            gst::debug!(
                CAT,
                "{} events dropped since the last cycle (a ring was full), {dropped} in all",
                dropped - self.last_drops
            );
            self.last_drops = dropped;
            chunk::drops(&mut self.buf, monotonic_ns(), dropped);
        }
    }
}

/// The `INFO` key/value pairs.
fn info_pairs(process: &str) -> Vec<(&'static str, String)> {
    let realtime = realtime_ns();
    let monotonic = monotonic_ns();
    let cmdline = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(String::from_utf8_lossy)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    vec![
        ("process", process.to_string()),
        ("hostname", hostname()),
        ("gst_version", gst::version_string().to_string()),
        ("tracer_version", env!("CARGO_PKG_VERSION").to_string()),
        ("cmdline", cmdline),
        ("realtime_ns", realtime.to_string()),
        ("monotonic_ns", monotonic.to_string()),
    ]
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer length is passed along.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// The thread's current name, else the one it had when first seen.
fn thread_name(tid: u32, fallback: &str) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_else(|_| fallback.to_string())
}

/// The element a pad belongs to (for an internal proxy pad, its ghost pad's).
fn owning_element(pad: &gst::Pad) -> Option<gst::Element> {
    let parent = pad.parent()?;
    match parent.downcast::<gst::Element>() {
        Ok(e) => Some(e),
        Err(parent) => parent.downcast::<gst::Pad>().ok()?.parent_element(),
    }
}

/// Names of `element`'s parents from the top-level bin, and that top-level bin.
fn ancestry(element: &gst::Element) -> (String, Option<gst::Object>) {
    let mut names = Vec::new();
    let mut top = None;
    let mut cur = element.parent();
    while let Some(obj) = cur {
        names.push(obj.name().to_string());
        cur = obj.parent();
        top = Some(obj);
    }
    names.reverse();
    (names.join("/"), top)
}

fn factory_name(element: &gst::Element) -> String {
    element
        .factory()
        .map(|f| f.name().to_string())
        .unwrap_or_default()
}

fn flag_if(cond: bool, flag: u32) -> u32 {
    if cond {
        flag
    } else {
        0
    }
}

/// True when one of `element`'s sink pads runs in pull mode.
fn pulls_upstream(element: &gst::Element) -> bool {
    element
        .sink_pads()
        .iter()
        .any(|p| p.mode() == gst::PadMode::Pull)
}

/// Everything the `PAD` chunk says about `pad`.
fn describe_pad(rec: &Recorder, pad_id: u32, pad: &gst::Pad) -> PadDesc {
    use chunk::pad_flags::*;
    let mut d = PadDesc {
        pad_id,
        pad: pad.name().to_string(),
        flags: flag_if(pad.direction() == gst::PadDirection::Src, SRC)
            | flag_if(pad.is::<gst::ProxyPad>(), GHOST_OR_PROXY),
        ..PadDesc::default()
    };
    if let Some(element) = owning_element(pad) {
        let ef = element.element_flags();
        d.flags |= flag_if(ef.contains(gst::ElementFlags::SOURCE), ELEMENT_IS_SOURCE)
            | flag_if(ef.contains(gst::ElementFlags::SINK), ELEMENT_IS_SINK)
            | flag_if(pulls_upstream(&element), ELEMENT_PULLS);
        d.element = element.name().to_string();
        d.factory = factory_name(&element);
        d.klass = element
            .factory()
            .and_then(|f| f.metadata(gst::ELEMENT_METADATA_KLASS).map(str::to_string))
            .unwrap_or_default();
        let (path, top) = ancestry(&element);
        d.parent_path = path;
        let top = top.map_or(Some(element.clone()), |t| t.downcast::<gst::Element>().ok());
        if let Some(top) = top.filter(|t| t.is::<gst::Bin>()) {
            d.pipeline_id = rec.pipeline_id(&top);
        }
    }
    if let Some(peer) = pad.peer() {
        d.peer_pad = peer.name().to_string();
        if let Some(pe) = owning_element(&peer) {
            d.flags |= flag_if(
                pe.element_flags().contains(gst::ElementFlags::SINK),
                PEER_IS_SINK,
            );
            d.peer_element = pe.name().to_string();
            d.peer_factory = factory_name(&pe);
        }
    }
    d
}

fn describe_clock(s: &ClockSample) -> ClockDesc {
    ClockDesc {
        pipeline_id: s.pipeline_id,
        mono_ns: s.mono_ns,
        clock_ns: s.clock_ns,
        base_time: s.base_time,
        state: s.state,
        flags: s.flags,
        pipeline: s.pipeline.name().to_string(),
        clock: s
            .clock
            .as_ref()
            .map(|c| c.name().to_string())
            .unwrap_or_default(),
    }
}

/// The `SEGMENT` chunk fields of a segment event seen at a pad.
fn describe_segment(pad_id: u32, t_ns: u64, segment: &gst::Segment) -> chunk::SegmentDesc {
    use gst::glib::translate::IntoGlib;
    let raw = |v: gst::GenericFormattedValue| v.value() as u64; // none (-1) reads as all ones
    chunk::SegmentDesc {
        pad_id,
        t_ns,
        format: segment.format().into_glib() as u32,
        flags: segment.flags().bits(),
        rate: segment.rate(),
        applied_rate: segment.applied_rate(),
        values: [
            raw(segment.base()),
            raw(segment.offset()),
            raw(segment.start()),
            raw(segment.stop()),
            raw(segment.time()),
            raw(segment.position()),
            raw(segment.duration()),
        ],
    }
}

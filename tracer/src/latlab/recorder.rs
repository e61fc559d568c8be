//! Process-wide recorder state and the streaming-thread path.
//!
//! The per-buffer path ([`on_push`], [`on_push_list`], [`on_push_post`]) only
//! touches thread-local state, a few atomics and the thread's own ring: no
//! locks, no allocation, no text, no I/O. Locks are taken once per thread
//! (registration) and once per pad per thread (pad id lookup on a cache miss).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;

use lltrace::chunk::clock_flags;
use lltrace::clock::monotonic_ns;
use lltrace::{flags, kind, Record, Spsc, NONE};

use super::pes::{plausible_ts_size, PesStart, PesTracker, TS_PACKET};
use super::settings::Settings;
use super::signals::WakePipe;

/// Depth of the per-thread stack of in-flight pushes (pushes nest).
const STACK_DEPTH: usize = 32;

static RECORDER: OnceLock<Recorder> = OnceLock::new();

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Shared, atomically updated facts about a pad.
pub struct PadInfo {
    pub id: u32,
    is_rtp: AtomicBool,
    peer_is_sink: AtomicBool,
}

/// A streaming thread known to the recorder: its ring and identity.
pub struct ThreadSlot {
    pub idx: u32,
    pub tid: u32,
    /// Thread name when it was first seen.
    pub name: String,
    pub ring: Spsc<Record>,
    /// Cleared when the thread exits; the writer then drains and frees the slot.
    pub alive: AtomicBool,
}

/// Pads that carried data, by address.
#[derive(Default)]
struct PadTable {
    by_ptr: HashMap<usize, Arc<PadInfo>>,
    next_id: u32,
    /// Pads waiting for the writer to describe them (holding a ref).
    pending: Vec<(u32, gst::Pad)>,
}

/// A top-level pipeline that has a `pipeline_id`.
pub struct PipelineEntry {
    ptr: usize,
    pub id: u64,
    pub weak: glib::WeakRef<gst::Element>,
}

/// A pipeline clock reading, taken where it happens and written by the writer.
pub struct ClockSample {
    pub pipeline_id: u64,
    pub pipeline: gst::Element,
    pub clock: Option<gst::Clock>,
    pub mono_ns: u64,
    pub clock_ns: u64,
    pub base_time: u64,
    pub state: u32,
    pub flags: u32,
}

/// Things the writer has to stringify and write out.
pub enum Note {
    Caps {
        pad_id: u32,
        t_ns: u64,
        caps: gst::Caps,
    },
    Clock(ClockSample),
    Segment {
        pad_id: u32,
        t_ns: u64,
        segment: gst::Segment,
    },
    Latency {
        pad_id: u32,
        t_ns: u64,
        latency_ns: u64,
    },
}

/// The process-wide recorder shared by the hooks and the writer thread.
pub struct Recorder {
    ring_capacity: usize,
    pid: u32,
    threads: Mutex<Vec<Arc<ThreadSlot>>>,
    next_thread_idx: AtomicU32,
    pads: Mutex<PadTable>,
    /// Bumped whenever a known pad is destroyed: thread caches then start over.
    pad_epoch: AtomicU64,
    pipelines: Mutex<Vec<PipelineEntry>>,
    next_pipeline_id: AtomicU64,
    notes: Mutex<Vec<Note>>,
    /// Events dropped because a ring was full.
    pub dropped: AtomicU64,
    /// Set when the trace is being closed; hooks stop recording.
    pub stop: AtomicBool,
    /// Set by the writer once `END` is written.
    pub finished: AtomicBool,
    /// Writer cycles completed.
    pub cycles: AtomicU64,
    pub pipe: WakePipe,
    writer: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes the process-wide recorder; `None` if there already is one.
pub fn install(settings: &Settings, pid: u32, pipe: WakePipe) -> Option<&'static Recorder> {
    RECORDER.set(Recorder::new(settings, pid, pipe)).ok()?;
    RECORDER.get()
}

/// The process-wide recorder, once installed.
pub fn installed() -> Option<&'static Recorder> {
    RECORDER.get()
}

impl Recorder {
    /// Keeps the writer thread's handle (joined at shutdown).
    pub fn set_writer(&self, handle: JoinHandle<()>) {
        *lock(&self.writer) = Some(handle);
    }

    /// The writer thread's handle, once.
    pub fn take_writer(&self) -> Option<JoinHandle<()>> {
        lock(&self.writer).take()
    }

    /// The process that installed the recorder (a forked child has another).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Records per streaming thread's ring.
    pub fn ring_capacity(&self) -> usize {
        self.ring_capacity
    }

    fn new(settings: &Settings, pid: u32, pipe: WakePipe) -> Self {
        Recorder {
            ring_capacity: settings.ring_capacity(),
            pid,
            threads: Mutex::default(),
            next_thread_idx: AtomicU32::new(1),
            pads: Mutex::default(),
            pad_epoch: AtomicU64::new(0),
            pipelines: Mutex::default(),
            next_pipeline_id: AtomicU64::new(1),
            notes: Mutex::default(),
            dropped: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            pipe,
            writer: Mutex::default(),
        }
    }

    /// A snapshot of the registered threads.
    pub fn threads(&self) -> Vec<Arc<ThreadSlot>> {
        lock(&self.threads).clone()
    }

    /// Forgets threads that exited and whose rings were drained.
    pub fn remove_threads(&self, idxs: &[u32]) {
        let removed: Vec<_> = {
            let mut threads = lock(&self.threads);
            let (gone, kept) = threads.drain(..).partition(|t| idxs.contains(&t.idx));
            *threads = kept;
            gone
        };
        drop(removed);
    }

    /// Takes the pads waiting for a description.
    pub fn take_pending_pads(&self) -> Vec<(u32, gst::Pad)> {
        std::mem::take(&mut lock(&self.pads).pending)
    }

    /// Takes the queued notes.
    pub fn take_notes(&self) -> Vec<Note> {
        std::mem::take(&mut *lock(&self.notes))
    }

    fn push_note(&self, note: Note) {
        lock(&self.notes).push(note);
    }

    /// Live pipelines with their ids.
    pub fn live_pipelines(&self) -> Vec<(u64, gst::Element)> {
        lock(&self.pipelines)
            .iter()
            .filter_map(|p| p.weak.upgrade().map(|e| (p.id, e)))
            .collect()
    }

    /// The id of a top-level `pipeline`, assigned on first sight.
    pub fn pipeline_id(&self, pipeline: &gst::Element) -> u64 {
        let ptr = pipeline.as_ptr() as usize;
        let mut pipelines = lock(&self.pipelines);
        if let Some(p) = pipelines.iter().find(|p| p.ptr == ptr) {
            return p.id;
        }
        let id = self.next_pipeline_id.fetch_add(1, Ordering::Relaxed);
        pipelines.push(PipelineEntry {
            ptr,
            id,
            weak: pipeline.downgrade(),
        });
        id
    }

    /// Drops what is known about a destroyed object (pad or pipeline).
    fn forget_object(&self, ptr: usize) {
        let pad = lock(&self.pads).by_ptr.remove(&ptr);
        if pad.is_some() {
            self.pad_epoch.fetch_add(1, Ordering::AcqRel);
        }
        let pipeline: Vec<_> = {
            let mut pipelines = lock(&self.pipelines);
            let (gone, kept) = pipelines.drain(..).partition(|p| p.ptr == ptr);
            *pipelines = kept;
            gone
        };
        drop((pad, pipeline));
    }

    /// Slow path: the shared info of `pad`, assigning an id on first sight.
    fn pad_info_slow(&self, pad: &gst::Pad) -> Arc<PadInfo> {
        let is_rtp = pad.current_caps().is_some_and(|c| caps_are_rtp(&c));
        let peer_is_sink = peer_is_sink(pad);
        let mut table = lock(&self.pads);
        let key = pad.as_ptr() as usize;
        if let Some(info) = table.by_ptr.get(&key) {
            return info.clone();
        }
        table.next_id += 1;
        let info = Arc::new(PadInfo {
            id: table.next_id,
            is_rtp: AtomicBool::new(is_rtp),
            peer_is_sink: AtomicBool::new(peer_is_sink),
        });
        table.by_ptr.insert(key, info.clone());
        table.pending.push((info.id, pad.clone()));
        info
    }

    fn register_thread(&self) -> Local {
        let slot = Arc::new(ThreadSlot {
            idx: self.next_thread_idx.fetch_add(1, Ordering::Relaxed),
            tid: gettid(),
            name: current_thread_name(),
            ring: Spsc::new(self.ring_capacity),
            alive: AtomicBool::new(true),
        });
        lock(&self.threads).push(slot.clone());
        Local {
            slot,
            pads: PadCache::default(),
            epoch: self.pad_epoch.load(Ordering::Acquire),
            stack: [InFlight::default(); STACK_DEPTH],
            depth: 0,
            pes: Box::default(),
        }
    }
}

/// Whether the first structure of `caps` is `application/x-rtp`.
fn caps_are_rtp(caps: &gst::CapsRef) -> bool {
    caps.structure(0)
        .is_some_and(|s| s.name() == "application/x-rtp")
}

/// Whether the element downstream of `pad` is a sink.
fn peer_is_sink(pad: &gst::Pad) -> bool {
    pad.peer()
        .and_then(|peer| peer.parent_element())
        .is_some_and(|e| e.element_flags().contains(gst::ElementFlags::SINK))
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn current_thread_name() -> String {
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes including the NUL.
    unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// A cheap hasher for pointer keys.
#[derive(Default)]
struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type PadCache = HashMap<usize, Arc<PadInfo>, BuildHasherDefault<PtrHasher>>;

/// What a push needs to know about its pad.
#[derive(Clone, Copy)]
struct PadState {
    id: u32,
    is_rtp: bool,
    peer_is_sink: bool,
}

/// A push in progress: its pad and, if it goes into a sink, its record.
#[derive(Clone, Copy, Default)]
struct InFlight {
    pad: usize,
    done: Option<Record>,
}

/// Per-thread state: ring slot, pad cache, in-flight stack and PES state.
struct Local {
    slot: Arc<ThreadSlot>,
    pads: PadCache,
    epoch: u64,
    stack: [InFlight; STACK_DEPTH],
    depth: usize,
    /// Allocated at registration, fixed size.
    pes: Box<PesTracker>,
}

impl Drop for Local {
    fn drop(&mut self) {
        self.slot.alive.store(false, Ordering::Release);
    }
}

impl Local {
    #[inline]
    fn pad_info(&mut self, rec: &Recorder, pad: &gst::Pad) -> &PadInfo {
        let epoch = rec.pad_epoch.load(Ordering::Acquire);
        if epoch != self.epoch {
            self.pads.clear();
            self.epoch = epoch;
        }
        self.pads
            .entry(pad.as_ptr() as usize)
            .or_insert_with(|| rec.pad_info_slow(pad))
    }

    #[inline]
    fn pad_state(&mut self, rec: &Recorder, pad: &gst::Pad) -> PadState {
        let info = self.pad_info(rec, pad);
        PadState {
            id: info.id,
            is_rtp: info.is_rtp.load(Ordering::Relaxed),
            peer_is_sink: info.peer_is_sink.load(Ordering::Relaxed),
        }
    }

    #[inline]
    fn emit(&self, rec: &Recorder, r: &Record) {
        if self.slot.ring.push(*r).is_err() {
            rec.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `pes` records, after the `push` record `push`, for every PES that
    /// starts in `buffer` if it holds MPEG-TS packets (decided by content).
    #[inline]
    fn scan_ts(&mut self, rec: &Recorder, buffer: &gst::BufferRef, push: &Record) {
        if !plausible_ts_size(buffer.size()) {
            return;
        }
        let Local { slot, pes, .. } = self;
        let mut emit = |p: &PesStart| {
            if slot.ring.push(pes_record(push, p)).is_err() {
                rec.dropped.fetch_add(1, Ordering::Relaxed);
            }
        };
        if buffer.n_memory() == 1 {
            if let Ok(map) = buffer.peek_memory(0).map_readable() {
                pes.scan(push.pad_id, push.t_ns, map.as_slice(), emit);
            }
        } else {
            scan_ts_pieces(pes, buffer, push, &mut emit);
        }
    }

    #[inline]
    fn enter(&mut self, pad: &gst::Pad, done: Option<Record>) {
        if let Some(e) = self.stack.get_mut(self.depth) {
            *e = InFlight {
                pad: pad.as_ptr() as usize,
                done,
            };
        }
        self.depth += 1;
    }

    #[inline]
    fn leave(&mut self, pad: &gst::Pad) -> Option<Record> {
        self.depth = self.depth.checked_sub(1)?;
        let e = self.stack.get(self.depth)?;
        (e.pad == pad.as_ptr() as usize).then_some(e.done).flatten()
    }
}

/// Runs `f` with the recorder and this thread's state (registering the thread
/// on first use); does nothing when not recording or when re-entered.
#[inline]
fn with_local(f: impl FnOnce(&Recorder, &mut Local)) {
    let Some(rec) = RECORDER.get() else { return };
    if rec.stop.load(Ordering::Relaxed) {
        return;
    }
    let _ = LOCAL.try_with(|cell| {
        if let Ok(mut local) = cell.try_borrow_mut() {
            f(rec, local.get_or_insert_with(|| rec.register_thread()));
        }
    });
}

/// The push record of `buffer` (RTP fields read with a 12-byte copy).
#[inline]
fn buffer_record(
    t_ns: u64,
    thread_idx: u32,
    pad: PadState,
    buffer: &gst::BufferRef,
    list_index: u16,
    event_flags: u8,
) -> Record {
    // SAFETY: `buffer` is a valid GstBuffer; only plain fields are read.
    let raw = unsafe { &*buffer.as_ptr() };
    let size = buffer.size();
    let mut r = Record {
        t_ns,
        pts: raw.pts,
        dts: raw.dts,
        duration: raw.duration,
        offset: raw.offset,
        offset_end: raw.offset_end,
        pad_id: pad.id,
        thread_idx,
        size: size.min(u32::MAX as usize) as u32,
        buffer_flags: raw.mini_object.flags,
        kind: kind::PUSH,
        flags: event_flags,
        list_index,
        ..Record::default()
    };
    if pad.is_rtp && size >= 12 {
        let mut hdr = [0u8; 12];
        // SAFETY: copies 12 bytes into a stack array of that size.
        let copied = unsafe {
            gst::ffi::gst_buffer_extract(buffer.as_mut_ptr(), 0, hdr.as_mut_ptr().cast(), 12)
        };
        if copied == 12 {
            r.set_rtp_header(&hdr);
        }
    }
    r
}

/// The `pes` record of `p`, found in the buffer of the `push` record `push`.
fn pes_record(push: &Record, p: &PesStart) -> Record {
    Record {
        pts: p.pts,
        dts: p.dts,
        duration: NONE,
        offset: p.prev_t_ns,
        offset_end: p.prev_es_bytes,
        size: p.packet_offset,
        rtp_ssrc: u32::from(p.pid),
        rtp_ts: u32::from(p.pes_packet_length),
        rtp_seq: 0,
        rtp_pt: p.stream_id,
        kind: kind::PES,
        flags: (push.flags & flags::IN_LIST)
            | if p.random_access {
                flags::RANDOM_ACCESS
            } else {
                0
            },
        ..*push
    }
}

/// [`Local::scan_ts`] for a buffer of several memories: packet by packet,
/// each copied to the stack (mapping the whole buffer would merge, i.e. allocate).
#[cold]
fn scan_ts_pieces(
    pes: &mut PesTracker,
    buffer: &gst::BufferRef,
    push: &Record,
    emit: &mut impl FnMut(&PesStart),
) {
    let size = buffer.size();
    let extract = |offset: usize, out: &mut [u8]| {
        // SAFETY: copies at most `out.len()` bytes into `out`.
        let n = unsafe {
            gst::ffi::gst_buffer_extract(
                buffer.as_mut_ptr(),
                offset,
                out.as_mut_ptr().cast(),
                out.len(),
            )
        };
        n == out.len()
    };
    let mut sync = [0u8; 1];
    for offset in (0..size).step_by(TS_PACKET) {
        if !extract(offset, &mut sync) || sync[0] != 0x47 {
            return;
        }
    }
    let mut pkt = [0u8; TS_PACKET];
    for offset in (0..size).step_by(TS_PACKET) {
        if extract(offset, &mut pkt) {
            let at = offset.min(u32::MAX as usize) as u32;
            pes.packet(push.pad_id, push.t_ns, &pkt, at, emit);
        }
    }
}

/// `pad-push-pre`: records the buffer.
#[inline]
pub fn on_push(pad: &gst::Pad, buffer: &gst::BufferRef) {
    with_local(|rec, local| {
        let st = local.pad_state(rec, pad);
        let r = buffer_record(monotonic_ns(), local.slot.idx, st, buffer, 0, 0);
        local.emit(rec, &r);
        local.scan_ts(rec, buffer, &r);
        local.enter(pad, st.peer_is_sink.then_some(r));
    });
}

/// `pad-push-list-pre`: records every buffer of the list.
#[inline]
pub fn on_push_list(pad: &gst::Pad, list: &gst::BufferListRef) {
    with_local(|rec, local| {
        let st = local.pad_state(rec, pad);
        let t = monotonic_ns();
        let mut last = None;
        for (i, buffer) in list.iter().enumerate() {
            let idx = i.min(u16::MAX as usize) as u16;
            let r = buffer_record(t, local.slot.idx, st, buffer, idx, flags::IN_LIST);
            local.emit(rec, &r);
            local.scan_ts(rec, buffer, &r);
            last = Some(r);
        }
        local.enter(pad, last.filter(|_| st.peer_is_sink));
    });
}

/// `pad-push-post` / `pad-push-list-post`: the `done` record for pushes into a sink.
#[inline]
pub fn on_push_post(pad: &gst::Pad) {
    with_local(|rec, local| {
        if let Some(mut r) = local.leave(pad) {
            r.t_ns = monotonic_ns();
            r.kind = kind::DONE;
            local.emit(rec, &r);
        }
    });
}

/// `pad-push-event-pre`: `eos` records, caps notes and the pad's RTP flag.
/// Queues a note about `pad` for the writer, made from the pad's id and the time now.
fn push_pad_note(pad: &gst::Pad, make: impl FnOnce(u32, u64) -> Note) {
    with_local(|rec, local| {
        let pad_id = local.pad_info(rec, pad).id;
        rec.push_note(make(pad_id, monotonic_ns()));
    });
}

pub fn on_event(pad: &gst::Pad, event: &gst::EventRef) {
    match event.type_() {
        gst::EventType::Eos => with_local(|rec, local| {
            let id = local.pad_info(rec, pad).id;
            let r = Record::empty(monotonic_ns(), id, local.slot.idx, kind::EOS);
            local.emit(rec, &r);
        }),
        gst::EventType::Caps => {
            let gst::EventView::Caps(c) = event.view() else {
                return;
            };
            let caps = c.caps();
            with_local(|rec, local| {
                let info = local.pad_info(rec, pad);
                info.is_rtp.store(caps_are_rtp(caps), Ordering::Relaxed);
                let pad_id = info.id;
                rec.push_note(Note::Caps {
                    pad_id,
                    t_ns: monotonic_ns(),
                    caps: caps.to_owned(),
                });
            });
        }
        gst::EventType::Latency => {
            if let gst::EventView::Latency(l) = event.view() {
                let latency_ns = l.latency().nseconds();
                push_pad_note(pad, |pad_id, t_ns| Note::Latency {
                    pad_id,
                    t_ns,
                    latency_ns,
                });
            }
        }
        gst::EventType::Segment => {
            if let gst::EventView::Segment(s) = event.view() {
                let segment = s.segment().clone();
                push_pad_note(pad, |pad_id, t_ns| Note::Segment {
                    pad_id,
                    t_ns,
                    segment,
                });
            }
        }
        _ => {}
    }
}

/// `pad-link-post`: refreshes whether a known source pad now feeds a sink.
pub fn on_link(src: &gst::Pad) {
    let Some(rec) = RECORDER.get() else { return };
    let info = lock(&rec.pads)
        .by_ptr
        .get(&(src.as_ptr() as usize))
        .cloned();
    if let Some(info) = info {
        info.peer_is_sink
            .store(peer_is_sink(src), Ordering::Relaxed);
    }
}

/// `object-destroyed`: a later object at the same address gets a new id.
pub fn on_object_destroyed(ptr: usize) {
    if let Some(rec) = RECORDER.get() {
        rec.forget_object(ptr);
    }
}

/// Whether `element` is a top-level pipeline (no parent, or a `GstPipeline`).
fn is_top_level(element: &gst::Element) -> bool {
    element.is::<gst::Pipeline>() || element.parent().is_none()
}

/// `element-change-state-post`: a `CLOCK` sample for top-level pipelines;
/// on the way to NULL, waits for the writer to put everything on disk.
pub fn on_state_changed(
    element: &gst::Element,
    change: gst::StateChange,
    result: Result<gst::StateChangeSuccess, gst::StateChangeError>,
) {
    let Some(rec) = RECORDER.get() else { return };
    if rec.stop.load(Ordering::Relaxed) || !is_top_level(element) {
        return;
    }
    let state = match result {
        Ok(gst::StateChangeSuccess::Success) | Ok(gst::StateChangeSuccess::NoPreroll) => {
            change.next()
        }
        _ => element.current_state(),
    };
    let id = rec.pipeline_id(element);
    rec.push_note(Note::Clock(ClockSample::take(id, element, state)));
    if change == gst::StateChange::ReadyToNull {
        rec.flush_and_wait();
    }
}

impl Recorder {
    /// Wakes the writer and waits (bounded) until a full cycle ran.
    fn flush_and_wait(&self) {
        let target = self.cycles.load(Ordering::Acquire) + 2;
        self.pipe.wake();
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.cycles.load(Ordering::Acquire) < target
            && !self.finished.load(Ordering::Acquire)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl ClockSample {
    /// Reads `pipeline`'s clock and CLOCK_MONOTONIC back to back.
    pub fn take(pipeline_id: u64, pipeline: &gst::Element, state: gst::State) -> Self {
        let clock = pipeline.clock();
        let base_time = pipeline.base_time();
        let before = monotonic_ns();
        let clock_time = clock.as_ref().and_then(|c| c.time());
        let after = monotonic_ns();
        let flags = if clock.as_ref().is_some_and(is_monotonic_system_clock) {
            clock_flags::SYSTEM_MONOTONIC
        } else {
            0
        };
        ClockSample {
            pipeline_id,
            pipeline: pipeline.clone(),
            mono_ns: before + (after - before) / 2,
            clock_ns: clock_time.map_or(NONE, |t| t.nseconds()),
            base_time: match (&clock, base_time) {
                (Some(_), Some(b)) => b.nseconds(),
                _ => NONE,
            },
            clock,
            state: state as u32,
            flags,
        }
    }
}

fn is_monotonic_system_clock(clock: &gst::Clock) -> bool {
    clock
        .downcast_ref::<gst::SystemClock>()
        .is_some_and(|c| c.property::<gst::ClockType>("clock-type") == gst::ClockType::Monotonic)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TS packet of PID 0x41 starting a video PES with PTS 0x1_0000_0001.
    fn pes_start() -> [u8; TS_PACKET] {
        let mut p = [0xAB; TS_PACKET];
        p[..4].copy_from_slice(&[0x47, 0x40, 0x41, 0x10]);
        p[4..13].copy_from_slice(&[0, 0, 1, 0xE0, 0, 0, 0x80, 0x80, 5]);
        p[13..18].copy_from_slice(&[0x29, 0, 1, 0, 3]);
        p
    }

    #[test]
    fn a_buffer_of_several_memories_is_scanned_like_one() {
        gst::init().unwrap();
        let mut cont = [0xCD; TS_PACKET];
        cont[..4].copy_from_slice(&[0x47, 0x00, 0x41, 0x11]);
        let data = [pes_start(), cont, pes_start()].concat();
        let mut buffer = gst::Buffer::new();
        for piece in [&data[..100], &data[100..400], &data[400..]] {
            buffer
                .get_mut()
                .unwrap()
                .append_memory(gst::Memory::from_slice(piece.to_vec()));
        }
        assert_eq!(buffer.n_memory(), 3);
        let push = Record {
            t_ns: 7,
            pad_id: 2,
            flags: flags::IN_LIST | flags::RTP,
            ..Record::default()
        };
        let (mut whole, mut pieces) = (Vec::new(), Vec::new());
        PesTracker::default().scan(2, 7, &data, |p| whole.push(pes_record(&push, p)));
        let mut tracker = PesTracker::default();
        scan_ts_pieces(&mut tracker, &buffer, &push, &mut |p| {
            pieces.push(pes_record(&push, p))
        });
        assert_eq!(whole, pieces);
        assert_eq!(pieces.len(), 2);
        let second = pieces[1];
        assert_eq!(
            (second.pts, second.size, second.rtp_ssrc),
            (0x1_0000_0001, 376, 0x41)
        );
        assert_eq!((second.offset, second.offset_end), (7, 2 * 184 - 14));
        assert_eq!(
            (second.kind, second.flags, second.rtp_pt),
            (kind::PES, flags::IN_LIST, 0xE0)
        );
        // A sync byte missing in a later memory: nothing.
        let mut bad = buffer.copy_deep().unwrap();
        bad.get_mut().unwrap().map_writable().unwrap()[188] = 0;
        let mut n = 0;
        scan_ts_pieces(&mut PesTracker::default(), &bad, &push, &mut |_| n += 1);
        assert_eq!(n, 0);
    }
    use proptest::prelude::*;

    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases(2000)))]

        /// A buffer of any bytes, cut into any memories, is scanned like the whole
        /// (and neither panics): the streaming thread's path for real buffers.
        #[test]
        fn any_buffer_in_any_memories_scans_like_the_whole(
            pkts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), TS_PACKET), 1..6),
            start_code in any::<bool>(),
            cuts in proptest::collection::vec(any::<usize>(), 0..5),
        ) {
            gst::init().unwrap();
            let mut data: Vec<u8> = pkts.concat();
            for p in data.chunks_exact_mut(TS_PACKET) {
                p[0] = 0x47;
                if start_code {
                    p[1] |= 0x40; // PUSI
                    p[3] = (p[3] & 0xC0) | 0x10; // payload only
                    p[4..7].copy_from_slice(&[0, 0, 1]);
                }
            }
            let mut at: Vec<usize> = cuts.iter().map(|c| c % data.len()).collect();
            at.extend([0, data.len()]);
            at.sort_unstable();
            at.dedup();
            let mut buffer = gst::Buffer::new();
            for w in at.windows(2) {
                buffer
                    .get_mut()
                    .unwrap()
                    .append_memory(gst::Memory::from_slice(data[w[0]..w[1]].to_vec()));
            }
            let push = Record { t_ns: 3, pad_id: 1, ..Record::default() };
            let (mut whole, mut pieces) = (Vec::new(), Vec::new());
            PesTracker::default().scan(1, 3, &data, |p| whole.push(pes_record(&push, p)));
            scan_ts_pieces(&mut PesTracker::default(), &buffer, &push, &mut |p| {
                pieces.push(pes_record(&push, p))
            });
            prop_assert_eq!(whole, pieces);
        }

        /// The push record of any buffer on an RTP pad: no panic, and the RTP fields
        /// come from the first 12 bytes when they hold an RTP header (version 2).
        #[test]
        fn any_buffer_on_an_rtp_pad_makes_a_record(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            gst::init().unwrap();
            let buffer = gst::Buffer::from_slice(bytes.clone());
            let pad = PadState { id: 5, is_rtp: true, peer_is_sink: false };
            let r = buffer_record(9, 1, pad, &buffer, 0, 0);
            prop_assert_eq!(r.size as usize, bytes.len());
            let rtp = bytes.len() >= 12 && bytes[0] >> 6 == 2;
            prop_assert_eq!(r.flags & flags::RTP != 0, rtp);
            if rtp {
                prop_assert_eq!(r.rtp_seq, u16::from_be_bytes([bytes[2], bytes[3]]));
                prop_assert_eq!(r.rtp_ssrc, u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]));
            }
        }
    }
}

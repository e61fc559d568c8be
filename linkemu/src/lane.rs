//! One direction of the link: a receive thread that applies the model and a release
//! thread that sends each packet at its scheduled instant.
//!
//! Packet bytes live in a preallocated pool of fixed slots. Slot indices travel
//! between the two threads through SPSC rings (`pending` with the packet's record,
//! `free` back), so the hot path neither allocates nor locks.

use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::PartialImpairment;
use crate::log::{self, LogRings, Record};
use crate::model::{Fate, Model};
use crate::net::{self, PacketSocket};
use crate::rt;
use lltrace::Spsc;

/// Bytes per packet slot (frames are at most 1514 bytes with offloads disabled).
pub const SLOT_SIZE: usize = 2048;
/// Packets one direction can hold in flight.
pub const SLOTS: usize = 16384;
/// Records each log ring holds between two writer passes (10 ms apart).
pub const LOG_RING: usize = 1 << 16;
/// The release thread sleeps until this long before a deadline, then spins.
pub const DEFAULT_SPIN_NS: u64 = 60_000;
/// After a stop, packets still queued are released for at most this long.
const DRAIN_GRACE_NS: u64 = 1_000_000_000;
const IDLE_WAIT_NS: u64 = 50_000_000;
const RX_PRIORITY: i32 = 40;
const RELEASE_PRIORITY: i32 = 50;

struct Pool {
    mem: Box<[UnsafeCell<u8>]>,
}

// SAFETY: a slot is accessed by one thread at a time; ownership of a slot index passes
// between threads only through the SPSC rings (release/acquire).
unsafe impl Sync for Pool {}
unsafe impl Send for Pool {}

impl Pool {
    fn new() -> Pool {
        Pool {
            mem: (0..SLOTS * SLOT_SIZE).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// The bytes of slot `i`.
    ///
    /// # Safety
    /// The caller must own slot `i` (hold its index) and not alias the slice.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, i: u32) -> &mut [u8] {
        let start = i as usize * SLOT_SIZE;
        std::slice::from_raw_parts_mut(self.mem[start].get(), SLOT_SIZE)
    }
}

#[derive(Clone, Copy, Default)]
struct Pending {
    slot: u32,
    len: u32,
    rec: Record,
}

pub struct Lane {
    direction: u8,
    pool: Pool,
    free: Spsc<u32>,
    pending: Spsc<Pending>,
    /// Bumped on every push to `pending`; the release thread's futex word.
    seq: AtomicU32,
    /// The deadline the release thread is sleeping towards (u64::MAX: none).
    target: AtomicU64,
    rx_done: AtomicBool,
    input: Arc<PacketSocket>,
    output: Arc<PacketSocket>,
}

impl Lane {
    pub fn new(direction: u8, input: Arc<PacketSocket>, output: Arc<PacketSocket>) -> Lane {
        let free = Spsc::new(SLOTS);
        for i in 0..SLOTS as u32 {
            let _ = free.push(i);
        }
        Lane {
            direction,
            pool: Pool::new(),
            free,
            pending: Spsc::new(SLOTS),
            seq: AtomicU32::new(0),
            target: AtomicU64::new(u64::MAX),
            rx_done: AtomicBool::new(false),
            input,
            output,
        }
    }

    fn rx_log(&self) -> usize {
        usize::from(self.direction) * 2
    }

    fn tx_log(&self) -> usize {
        usize::from(self.direction) * 2 + 1
    }
}

/// The receive side's state.
struct Receiver {
    lane: Arc<Lane>,
    model: Model,
    schedule: Vec<(u64, PartialImpairment)>,
    next_change: usize,
    start_ns: u64,
    logs: Arc<LogRings>,
    /// Slots this thread owns besides the one it receives into.
    stash: Vec<u32>,
    packet_id: u32,
}

pub fn spawn_receiver(
    lane: Arc<Lane>,
    model: Model,
    schedule: Vec<(u64, PartialImpairment)>,
    start_ns: u64,
    logs: Arc<LogRings>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let name = format!("rx-{}", lane.direction);
    let mut rx = Receiver {
        lane,
        model,
        schedule,
        next_change: 0,
        start_ns,
        logs,
        stash: Vec::with_capacity(SLOTS),
        packet_id: 0,
    };
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            rt::try_realtime(RX_PRIORITY);
            rx.run(&stop);
            rx.lane.rx_done.store(true, Ordering::Release);
        })
        .expect("spawn receive thread")
}

impl Receiver {
    fn take_slot(&mut self) -> Option<u32> {
        self.stash.pop().or_else(|| self.lane.free.pop())
    }

    fn run(&mut self, stop: &AtomicBool) {
        let mut scratch = vec![0u8; SLOT_SIZE];
        let mut current = self.take_slot();
        while !stop.load(Ordering::Acquire) {
            if current.is_none() {
                current = self.take_slot();
            }
            let lane = self.lane.clone();
            // SAFETY: this thread owns `current` until it hands it to `pending`.
            let buf = match current {
                Some(slot) => unsafe { lane.pool.slot(slot) },
                None => &mut scratch[..],
            };
            let Some(got) = lane.input.recv(buf) else {
                continue;
            };
            let arrival = rt::now_ns();
            let len = got.len.min(SLOT_SIZE);
            let mut rec = Record {
                arrival_ns: arrival,
                size: got.len as u32,
                direction: lane.direction,
                packet_id: self.packet_id,
                ..Record::default()
            };
            self.packet_id = self.packet_id.wrapping_add(1);
            net::inspect(&buf[..len], &mut rec);
            self.apply_schedule(arrival);
            if !net::is_ipv4(&buf[..len]) {
                self.pass_through(&buf[..len], rec);
            } else if got.truncated || current.is_none() {
                rec.flags |= if got.truncated {
                    log::FLAG_TRUNCATED
                } else {
                    log::FLAG_POOL_FULL
                };
                self.drop(rec, log::VERDICT_QUEUE);
            } else if let Some(slot) = current {
                if self.impair(slot, len, rec) {
                    current = None;
                }
            }
        }
    }

    /// Apply every schedule entry due by `now`.
    fn apply_schedule(&mut self, now: u64) {
        while let Some((at, set)) = self.schedule.get(self.next_change) {
            if self.start_ns + at > now {
                break;
            }
            self.model.imp = self.model.imp.with(set);
            self.next_change += 1;
        }
    }

    fn pass_through(&self, frame: &[u8], mut rec: Record) {
        rec.flags |= log::FLAG_PASSTHROUGH;
        rec.scheduled_ns = rec.arrival_ns;
        rec.released_ns = rt::now_ns();
        if !self.lane.output.send(frame) {
            rec.flags |= log::FLAG_SEND_FAILED;
        }
        self.logs.put(self.lane.rx_log(), rec);
    }

    fn drop(&self, mut rec: Record, verdict: u8) {
        rec.verdict = verdict;
        self.logs.put(self.lane.rx_log(), rec);
    }

    /// Loss, duplication, bottleneck and delay for a packet in `slot`; returns whether
    /// the slot was handed to the release thread.
    fn impair(&mut self, slot: u32, len: usize, rec: Record) -> bool {
        let duplicate = self.model.duplicate();
        let copy = if duplicate { self.take_slot() } else { None };
        if let Some(copy_slot) = copy {
            // SAFETY: this thread owns both slots; they are distinct.
            unsafe {
                let (src, dst) = (self.lane.pool.slot(slot), self.lane.pool.slot(copy_slot));
                dst[..len].copy_from_slice(&src[..len]);
            }
        }
        let handed = if self.model.lose() {
            self.drop(rec, log::VERDICT_LOSS);
            false
        } else {
            self.stage(slot, len, rec, log::VERDICT_DELIVERED)
        };
        if duplicate {
            match copy {
                Some(copy_slot) => {
                    if !self.stage(copy_slot, len, rec, log::VERDICT_DUPLICATE) {
                        self.stash.push(copy_slot);
                    }
                }
                None => {
                    let mut rec = rec;
                    rec.flags |= log::FLAG_POOL_FULL | log::FLAG_COPY;
                    self.drop(rec, log::VERDICT_QUEUE);
                }
            }
        }
        handed
    }

    /// Bottleneck and delay; queue the slot for release or log the tail drop.
    fn stage(&mut self, slot: u32, len: usize, mut rec: Record, verdict: u8) -> bool {
        match self.model.schedule(rec.arrival_ns, rec.size) {
            Fate::QueueDrop => {
                if verdict == log::VERDICT_DUPLICATE {
                    rec.flags |= log::FLAG_COPY;
                }
                self.drop(rec, log::VERDICT_QUEUE);
                false
            }
            Fate::Send { at, reordered } => {
                rec.verdict = verdict;
                if verdict == log::VERDICT_DUPLICATE {
                    rec.flags |= log::FLAG_COPY;
                }
                rec.scheduled_ns = at;
                if reordered {
                    rec.flags |= log::FLAG_REORDERED;
                }
                let item = Pending {
                    slot,
                    len: len as u32,
                    rec,
                };
                if self.lane.pending.push(item).is_err() {
                    // Cannot happen: `pending` holds every slot.
                    return false;
                }
                self.lane.seq.fetch_add(1, Ordering::Release);
                if at < self.lane.target.load(Ordering::Acquire) {
                    rt::futex_wake(&self.lane.seq);
                }
                true
            }
        }
    }
}

pub fn spawn_releaser(
    lane: Arc<Lane>,
    logs: Arc<LogRings>,
    spin_ns: u64,
    cpu: Option<usize>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("release-{}", lane.direction))
        .spawn(move || {
            if let Some(cpu) = cpu {
                rt::pin_to_cpu(cpu);
            }
            rt::try_realtime(RELEASE_PRIORITY);
            release_loop(&lane, &logs, spin_ns);
        })
        .expect("spawn release thread")
}

/// Send each queued packet at its scheduled time, earliest first (FIFO among equal times).
fn release_loop(lane: &Lane, logs: &LogRings, spin_ns: u64) {
    let mut heap: BinaryHeap<Reverse<(u64, u64, u32)>> = BinaryHeap::with_capacity(SLOTS);
    let mut meta = vec![
        Pending {
            slot: 0,
            len: 0,
            rec: Record::default()
        };
        SLOTS
    ];
    let mut order = 0u64;
    let mut drain_deadline = u64::MAX;
    loop {
        let seen = lane.seq.load(Ordering::Acquire);
        while let Some(p) = lane.pending.pop() {
            meta[p.slot as usize] = p;
            heap.push(Reverse((p.rec.scheduled_ns, order, p.slot)));
            order += 1;
        }
        if drain_deadline == u64::MAX && lane.rx_done.load(Ordering::Acquire) {
            drain_deadline = rt::now_ns() + DRAIN_GRACE_NS;
            if lane.pending.is_empty() && heap.is_empty() {
                break;
            }
        }
        let Some(&Reverse((at, _, slot))) = heap.peek() else {
            if drain_deadline != u64::MAX {
                break;
            }
            lane.target.store(u64::MAX, Ordering::Release);
            rt::futex_wait_until(&lane.seq, seen, rt::now_ns() + IDLE_WAIT_NS);
            continue;
        };
        if at > drain_deadline {
            discard(lane, logs, &mut heap, &meta);
            break;
        }
        lane.target.store(at, Ordering::Release);
        if at > rt::now_ns() + spin_ns {
            rt::futex_wait_until(&lane.seq, seen, at - spin_ns);
            continue;
        }
        let mut now = rt::now_ns();
        while now < at {
            std::hint::spin_loop();
            now = rt::now_ns();
        }
        heap.pop();
        let p = &mut meta[slot as usize];
        p.rec.released_ns = now;
        // SAFETY: the release thread owns the slot until it pushes it to `free`.
        let frame = unsafe { &lane.pool.slot(slot)[..p.len as usize] };
        if !lane.output.send(frame) {
            p.rec.flags |= log::FLAG_SEND_FAILED;
        }
        logs.put(lane.tx_log(), p.rec);
        let _ = lane.free.push(slot);
    }
    lane.target.store(u64::MAX, Ordering::Release);
}

/// Log every packet still queued at the end of the drain grace as not sent.
fn discard(
    lane: &Lane,
    logs: &LogRings,
    heap: &mut BinaryHeap<Reverse<(u64, u64, u32)>>,
    meta: &[Pending],
) {
    while let Some(Reverse((_, _, slot))) = heap.pop() {
        let mut rec = meta[slot as usize].rec;
        rec.verdict = log::VERDICT_UNSENT;
        logs.put(lane.tx_log(), rec);
        let _ = lane.free.push(slot);
    }
}

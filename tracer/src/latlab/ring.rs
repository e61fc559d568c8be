//! A bounded single-producer/single-consumer ring of [`Record`]s.
//!
//! The producer is the thread that owns the ring (a streaming thread), the
//! consumer is the writer thread. Pushing never blocks, locks or allocates: a
//! full ring rejects the record.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::record::Record;

/// Keeps the producer and consumer indices on separate cache lines.
#[repr(align(64))]
struct CachePadded<T>(T);

/// SPSC ring with a power-of-two capacity.
pub struct Ring {
    slots: Box<[UnsafeCell<Record>]>,
    mask: usize,
    /// Next slot the producer writes (only the producer stores it).
    head: CachePadded<AtomicUsize>,
    /// Next slot the consumer reads (only the consumer stores it).
    tail: CachePadded<AtomicUsize>,
}

// SAFETY: a slot is written only by the producer while it is outside
// `tail..head`, and read only by the consumer while it is inside; the
// release/acquire pairs on `head` and `tail` order these accesses.
unsafe impl Sync for Ring {}
unsafe impl Send for Ring {}

impl Ring {
    /// Allocates (and touches) a ring holding at least `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.clamp(2, 1 << 28).next_power_of_two();
        let slots = (0..cap)
            .map(|_| UnsafeCell::new(Record::default()))
            .collect();
        Ring {
            slots,
            mask: cap - 1,
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Number of records waiting for the consumer.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let head = self.head.0.load(Ordering::Acquire);
        head.wrapping_sub(self.tail.0.load(Ordering::Acquire))
    }

    /// Appends `record`; returns `false` if the ring is full.
    ///
    /// Must only be called by the single producer.
    #[inline]
    pub fn push(&self, record: &Record) -> bool {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        if head.wrapping_sub(tail) > self.mask {
            return false;
        }
        // SAFETY: the slot is outside `tail..head`, the consumer does not read it.
        unsafe { *self.slots[head & self.mask].get() = *record };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Hands every waiting record to `f`, then frees their slots; returns how many.
    ///
    /// Must only be called by the single consumer.
    pub fn drain(&self, mut f: impl FnMut(&Record)) -> usize {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        let mut i = tail;
        while i != head {
            // SAFETY: the slot is inside `tail..head`, the producer does not write it.
            f(unsafe { &*self.slots[i & self.mask].get() });
            i = i.wrapping_add(1);
        }
        self.tail.0.store(head, Ordering::Release);
        head.wrapping_sub(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rec(n: u64) -> Record {
        Record {
            t_ns: n,
            ..Record::default()
        }
    }

    #[test]
    fn rounds_capacity_up() {
        assert_eq!(Ring::with_capacity(1000).capacity(), 1024);
        assert_eq!(Ring::with_capacity(0).capacity(), 2);
    }

    #[test]
    fn rejects_when_full_and_keeps_order() {
        let ring = Ring::with_capacity(4);
        for n in 0..4 {
            assert!(ring.push(&rec(n)));
        }
        assert!(!ring.push(&rec(99)));
        assert_eq!(ring.len(), 4);
        let mut seen = Vec::new();
        assert_eq!(ring.drain(|r| seen.push(r.t_ns)), 4);
        assert_eq!(seen, vec![0, 1, 2, 3]);
        assert!(ring.push(&rec(4)));
        assert_eq!(ring.drain(|r| seen.push(r.t_ns)), 1);
        assert_eq!(seen.last(), Some(&4));
    }

    #[test]
    fn concurrent_producer_and_consumer_lose_nothing() {
        const N: u64 = 200_000;
        let ring = Arc::new(Ring::with_capacity(64));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut dropped = 0u64;
                for n in 0..N {
                    if !ring.push(&rec(n)) {
                        dropped += 1;
                    }
                }
                dropped
            })
        };
        let mut got = Vec::new();
        while !producer.is_finished() || ring.len() > 0 {
            ring.drain(|r| got.push(r.t_ns));
        }
        let dropped = producer.join().unwrap();
        assert_eq!(got.len() as u64 + dropped, N);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "records out of order");
    }
}

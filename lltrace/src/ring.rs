//! A bounded lock-free single-producer single-consumer ring of `Copy` items.
//!
//! Preallocated (and every slot written) once; [`Spsc::push`], [`Spsc::pop`] and
//! [`Spsc::drain`] never allocate, lock or block: a full ring hands the item back. The
//! producer and the consumer must each be one thread at a time (the tracer: a
//! streaming thread and the writer thread; linkemu: its fixed threads).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest capacity, in items.
pub const MAX_CAPACITY: usize = 1 << 28;

/// Keeps the producer and consumer indices on separate cache lines.
#[repr(align(64))]
struct CachePadded(AtomicUsize);

/// SPSC ring with a power-of-two capacity.
pub struct Spsc<T: Copy> {
    slots: Box<[UnsafeCell<T>]>,
    mask: usize,
    /// Next slot the producer writes (only the producer stores it).
    head: CachePadded,
    /// Next slot the consumer reads (only the consumer stores it).
    tail: CachePadded,
}

// SAFETY: a slot is written only by the producer while it is outside `tail..head`,
// and read only by the consumer while it is inside; the release/acquire pairs on
// `head` and `tail` order these accesses.
unsafe impl<T: Copy + Send> Sync for Spsc<T> {}
unsafe impl<T: Copy + Send> Send for Spsc<T> {}

impl<T: Copy + Default> Spsc<T> {
    /// A ring holding at least `capacity` items (a power of two, 2 to [`MAX_CAPACITY`]);
    /// every slot is written here, so the hot path takes no page fault on it.
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.clamp(2, MAX_CAPACITY).next_power_of_two();
        let slots = (0..cap).map(|_| UnsafeCell::new(T::default())).collect();
        Spsc {
            slots,
            mask: cap - 1,
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
        }
    }
}

impl<T: Copy> Spsc<T> {
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Number of items waiting (exact for the consumer, a hint for others).
    pub fn len(&self) -> usize {
        let head = self.head.0.load(Ordering::Acquire);
        head.wrapping_sub(self.tail.0.load(Ordering::Acquire))
    }

    /// Whether no item waits (exact for the consumer, a hint for others).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Producer side: appends `item`; gives it back when the ring is full.
    #[inline]
    pub fn push(&self, item: T) -> Result<(), T> {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        if head.wrapping_sub(tail) > self.mask {
            return Err(item);
        }
        // SAFETY: the slot is outside `tail..head`, the consumer does not read it.
        unsafe { *self.slots[head & self.mask].get() = item };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Consumer side: takes the oldest item, if any.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        if tail == head {
            return None;
        }
        // SAFETY: the slot is inside `tail..head`, the producer does not write it.
        let item = unsafe { *self.slots[tail & self.mask].get() };
        self.tail.0.store(tail.wrapping_add(1), Ordering::Release);
        Some(item)
    }

    /// Consumer side: hands every waiting item to `f`, then frees their slots; returns
    /// how many.
    pub fn drain(&self, mut f: impl FnMut(&T)) -> usize {
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
    use crate::record::Record;
    use std::sync::Arc;

    fn rec(n: u64) -> Record {
        Record {
            t_ns: n,
            ..Record::default()
        }
    }

    #[test]
    fn rounds_capacity_up() {
        assert_eq!(Spsc::<Record>::new(1000).capacity(), 1024);
        assert_eq!(Spsc::<u32>::new(0).capacity(), 2);
        assert_eq!(Spsc::<u8>::new(usize::MAX).capacity(), MAX_CAPACITY);
    }

    #[test]
    fn rejects_when_full_and_keeps_order() {
        let ring = Spsc::new(4);
        for n in 0..4 {
            assert!(ring.push(rec(n)).is_ok());
        }
        assert_eq!(ring.push(rec(99)), Err(rec(99)));
        assert_eq!(ring.len(), 4);
        let mut seen = Vec::new();
        assert_eq!(ring.drain(|r| seen.push(r.t_ns)), 4);
        assert_eq!(seen, vec![0, 1, 2, 3]);
        assert!(ring.is_empty());
        assert!(ring.push(rec(4)).is_ok());
        assert_eq!(ring.drain(|r| seen.push(r.t_ns)), 1);
        assert_eq!(seen.last(), Some(&4));
    }

    #[test]
    fn pop_is_fifo_and_frees_a_slot() {
        let ring = Spsc::new(4);
        for i in 0..4 {
            ring.push(i).unwrap();
        }
        assert_eq!(ring.push(9), Err(9));
        assert_eq!(ring.pop(), Some(0));
        ring.push(4).unwrap();
        let rest: Vec<_> = std::iter::from_fn(|| ring.pop()).collect();
        assert_eq!(rest, vec![1, 2, 3, 4]);
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn concurrent_producer_and_draining_consumer_lose_nothing() {
        const N: u64 = 200_000;
        let ring = Arc::new(Spsc::new(64));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut dropped = 0u64;
                for n in 0..N {
                    if ring.push(rec(n)).is_err() {
                        dropped += 1;
                    }
                }
                dropped
            })
        };
        let mut got = Vec::new();
        while !producer.is_finished() || !ring.is_empty() {
            ring.drain(|r| got.push(r.t_ns));
        }
        let dropped = producer.join().unwrap();
        assert_eq!(got.len() as u64 + dropped, N);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "records out of order");
    }

    #[test]
    fn concurrent_producer_and_popping_consumer_keep_every_item() {
        let ring = Arc::new(Spsc::new(64));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for i in 0..100_000u64 {
                    while ring.push(i).is_err() {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let mut expected = 0u64;
        while expected < 100_000 {
            if let Some(v) = ring.pop() {
                assert_eq!(v, expected);
                expected += 1;
            }
        }
        producer.join().unwrap();
    }
}

//! A bounded single-producer single-consumer ring of `Copy` items.
//!
//! Preallocated once; `push` and `pop` never allocate, lock or block. The producer
//! and the consumer must each be one thread (the emulator's threads are fixed).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

#[repr(align(64))]
struct Padded(AtomicUsize);

pub struct Spsc<T: Copy> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    head: Padded,
    tail: Padded,
}

// SAFETY: a slot is written only by the producer before `tail` is published
// (Release) and read only by the consumer after observing it (Acquire); the
// consumer releases it through `head` the same way.
unsafe impl<T: Copy + Send> Sync for Spsc<T> {}
unsafe impl<T: Copy + Send> Send for Spsc<T> {}

impl<T: Copy> Spsc<T> {
    /// A ring holding at least `capacity` items (rounded up to a power of two).
    pub fn new(capacity: usize) -> Self {
        let size = capacity.max(2).next_power_of_two();
        let slots = (0..size)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Spsc {
            slots,
            mask: size - 1,
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        }
    }

    /// Producer side: append `item`; gives it back when the ring is full.
    pub fn push(&self, item: T) -> Result<(), T> {
        let tail = self.tail.0.load(Ordering::Relaxed);
        let head = self.head.0.load(Ordering::Acquire);
        if tail.wrapping_sub(head) > self.mask {
            return Err(item);
        }
        // SAFETY: the slot is not visible to the consumer until `tail` moves.
        unsafe { (*self.slots[tail & self.mask].get()).write(item) };
        self.tail.0.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Consumer side: take the oldest item, if any.
    pub fn pop(&self) -> Option<T> {
        let head = self.head.0.load(Ordering::Relaxed);
        let tail = self.tail.0.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        // SAFETY: the producer initialised this slot before publishing `tail`.
        let item = unsafe { (*self.slots[head & self.mask].get()).assume_init() };
        self.head.0.store(head.wrapping_add(1), Ordering::Release);
        Some(item)
    }

    /// Whether the ring is empty (exact for the consumer, a hint for others).
    pub fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.tail.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::Spsc;
    use std::sync::Arc;

    #[test]
    fn fifo_and_full() {
        let ring = Spsc::new(4);
        for i in 0..4 {
            ring.push(i).unwrap();
        }
        assert_eq!(ring.push(9), Err(9));
        assert_eq!(ring.pop(), Some(0));
        ring.push(4).unwrap();
        let rest: Vec<_> = std::iter::from_fn(|| ring.pop()).collect();
        assert_eq!(rest, vec![1, 2, 3, 4]);
    }

    #[test]
    fn across_threads() {
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

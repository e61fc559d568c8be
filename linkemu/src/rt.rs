//! Clocks, precise waits and real-time scheduling helpers (Linux).

use std::sync::atomic::AtomicU32;

/// CLOCK_MONOTONIC now, in nanoseconds (the clock every trace and link log uses).
pub use lltrace::clock::monotonic_ns as now_ns;
use lltrace::clock::timespec;

/// Block while `word` holds `expected`, until `deadline_ns` on CLOCK_MONOTONIC (absolute)
/// or a [`futex_wake`]. FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout, so this
/// is an absolute-deadline sleep like `clock_nanosleep(TIMER_ABSTIME)` that can also be
/// woken early when a packet with an earlier deadline arrives.
pub fn futex_wait_until(word: &AtomicU32, expected: u32, deadline_ns: u64) {
    let ts = timespec(deadline_ns);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
}

/// Wake the thread blocked in [`futex_wait_until`] on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

/// Try to run the calling thread under SCHED_FIFO at `priority`; returns whether it worked.
/// Also asks for 1 ns timer slack (the default 50 µs would blur every wake-up).
pub fn try_realtime(priority: i32) -> bool {
    // SAFETY: plain syscalls on the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
        let param = libc::sched_param {
            sched_priority: priority,
        };
        libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) == 0
    }
}

/// Run the calling thread on CPU `cpu` only; returns whether it worked.
pub fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; plain syscall on this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Lock the memory mapped so far (the preallocated pools and rings) so the hot path
/// takes no page faults (best effort).
pub fn lock_memory() -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::mlockall(libc::MCL_CURRENT) == 0 }
}

/// Sleep until `ns` on CLOCK_MONOTONIC (absolute: no drift over many sleeps).
pub fn sleep_until(ns: u64) {
    let ts = timespec(ns);
    // SAFETY: valid timespec.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// Block SIGINT and SIGTERM in this thread (and the threads it spawns later), so that
/// one thread can wait for them ([`wait_for_stop_signal`], `sigtimedwait`).
pub fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Wait for one of the signals blocked by [`block_stop_signals`].
pub fn wait_for_stop_signal(set: &libc::sigset_t) {
    let mut signum = 0;
    // SAFETY: `set` is a valid, initialised signal set.
    unsafe { libc::sigwait(set, &mut signum) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futex_times_out_at_deadline() {
        let word = AtomicU32::new(7);
        let deadline = now_ns() + 2_000_000;
        futex_wait_until(&word, 7, deadline);
        assert!(now_ns() >= deadline);
    }
}

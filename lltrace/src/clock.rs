//! Clock reads in nanoseconds (Linux `clock_gettime`), as every `t_ns` of a trace is.

/// `clock` (e.g. `libc::CLOCK_MONOTONIC`) now, in nanoseconds.
#[inline]
pub fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill in.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: the time base of every trace and link log.
#[inline]
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds.
#[inline]
pub fn realtime_ns() -> u64 {
    now_ns(libc::CLOCK_REALTIME)
}

/// `ns` nanoseconds as a `timespec` (for absolute-deadline sleeps and waits).
pub fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_does_not_go_back_and_realtime_is_after_2020() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
        assert!(realtime_ns() > 1_577_836_800_000_000_000);
    }

    #[test]
    fn timespec_splits_seconds() {
        let ts = timespec(3_000_000_007);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (3, 7));
    }
}

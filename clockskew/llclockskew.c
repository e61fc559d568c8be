/* libllclockskew: a planted rate error on CLOCK_MONOTONIC, for latlab's clock lab.
 *
 * Loaded with LD_PRELOAD into every process of a lab host whose scenario says
 * `clock = { drift_ppm = K }`, it makes that host's monotonic clocks run K parts per
 * million fast (or slow): a clock read of M (already offset by the host's time
 * namespace) returns
 *
 *     M' = M + (M - E) * K * 1e-6          (E: LATLAB_CLOCK_EPOCH_NS, shared by the host)
 *
 * and every wait the process asks of the kernel on those clocks is converted back, so
 * the process keeps time by its own (skewed) clock as a real machine with a fast
 * oscillator does: absolute deadlines (clock_nanosleep TIMER_ABSTIME, futex
 * FUTEX_WAIT_BITSET as GStreamer's clock uses it, sem_clockwait as Python's locks use
 * it) are mapped to the kernel's clock, relative ones scaled by 1 / (1 + K * 1e-6).
 * CLOCK_REALTIME is left alone: the kernel's (unfaked) realtime and its sync state stay
 * the machine's.
 *
 * Why not libfaketime (Debian 0.9.10): its rate multiplier fakes every clock from one
 * start value taken from CLOCK_REALTIME, so CLOCK_MONOTONIC jumps to a realtime-like
 * value and the time namespace's offset is lost, and it does not convert futex
 * deadlines: a GStreamer pipeline under it waits on an absolute deadline 56 years away
 * (measured: gst-launch-1.0 with a live source hangs at 0 % CPU).
 *
 * Not covered: programs that read the clock through the vDSO without libc (Go),
 * timerfd deadlines, and syscalls issued without libc's syscall(). docs/clocks.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

static double rate = 0.0;      /* K * 1e-6 */
static int64_t epoch = 0;      /* E, ns */
static int active = 0;

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static long (*real_syscall)(long, ...);
static int (*real_sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
static int (*real_cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                                  const struct timespec *);

static void resolve(void) {
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    real_clock_nanosleep = dlsym(RTLD_NEXT, "clock_nanosleep");
    real_nanosleep = dlsym(RTLD_NEXT, "nanosleep");
    real_syscall = dlsym(RTLD_NEXT, "syscall");
    real_sem_clockwait = dlsym(RTLD_NEXT, "sem_clockwait");
    real_cond_clockwait = dlsym(RTLD_NEXT, "pthread_cond_clockwait");
    const char *ppm = getenv("LATLAB_CLOCK_DRIFT_PPM");
    const char *at = getenv("LATLAB_CLOCK_EPOCH_NS");
    if (ppm && at) {
        rate = strtod(ppm, NULL) * 1e-6;
        epoch = strtoll(at, NULL, 10);
        active = rate != 0.0;
    }
}

/* Resolved on first use too: other libraries' constructors may read the clock first. */
__attribute__((constructor)) static void init(void) {
    if (!real_syscall) resolve();
}
#define READY() do { if (!real_syscall) resolve(); } while (0)

static int skewed(clockid_t clock) {
    return active && (clock == CLOCK_MONOTONIC || clock == CLOCK_MONOTONIC_RAW ||
                      clock == CLOCK_MONOTONIC_COARSE || clock == CLOCK_BOOTTIME);
}

static int64_t ns_of(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

static struct timespec ts_of(int64_t ns) {
    struct timespec ts;
    if (ns < 0) ns = 0;
    ts.tv_sec = ns / 1000000000LL;
    ts.tv_nsec = ns % 1000000000LL;
    return ts;
}

static int64_t to_fake(int64_t m) { return m + (int64_t)((double)(m - epoch) * rate); }
static int64_t to_real(int64_t f) { return epoch + (int64_t)((double)(f - epoch) / (1.0 + rate)); }
static int64_t scale_wait(int64_t d) { return (int64_t)((double)d / (1.0 + rate)); }

int clock_gettime(clockid_t clock, struct timespec *ts) {
    READY();
    int r = real_clock_gettime(clock, ts);
    if (r == 0 && skewed(clock)) *ts = ts_of(to_fake(ns_of(ts)));
    return r;
}

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                    struct timespec *rem) {
    READY();
    if (!skewed(clock) || req == NULL) return real_clock_nanosleep(clock, flags, req, rem);
    struct timespec real_req =
        ts_of((flags & TIMER_ABSTIME) ? to_real(ns_of(req)) : scale_wait(ns_of(req)));
    return real_clock_nanosleep(clock, flags, &real_req, rem);
}

int nanosleep(const struct timespec *req, struct timespec *rem) {
    READY();
    if (!active || req == NULL) return real_nanosleep(req, rem);
    struct timespec real_req = ts_of(scale_wait(ns_of(req)));
    return real_nanosleep(&real_req, rem);
}

int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime) {
    READY();
    if (!skewed(clock)) return real_sem_clockwait(sem, clock, abstime);
    struct timespec real_abs = ts_of(to_real(ns_of(abstime)));
    return real_sem_clockwait(sem, clock, &real_abs);
}

int pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex, clockid_t clock,
                           const struct timespec *abstime) {
    READY();
    if (!skewed(clock))
        return real_cond_clockwait(cond, mutex, clock, abstime);
    struct timespec real_abs = ts_of(to_real(ns_of(abstime)));
    return real_cond_clockwait(cond, mutex, clock, &real_abs);
}

long syscall(long number, ...) {
    READY();
    va_list ap;
    va_start(ap, number);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    if (active && number == SYS_futex && a4 != 0) {
        int op = (int)a2;
        int cmd = op & FUTEX_CMD_MASK;
        const struct timespec *timeout = (const struct timespec *)a4;
        struct timespec converted;
        if (cmd == FUTEX_WAIT) { /* relative */
            converted = ts_of(scale_wait(ns_of(timeout)));
            return real_syscall(number, a1, a2, a3, (long)&converted, a5, a6);
        }
        if (cmd == FUTEX_WAIT_BITSET && !(op & FUTEX_CLOCK_REALTIME)) { /* absolute */
            converted = ts_of(to_real(ns_of(timeout)));
            return real_syscall(number, a1, a2, a3, (long)&converted, a5, a6);
        }
    }
    if (active && number == SYS_clock_gettime) {
        long r = real_syscall(number, a1, a2, a3, a4, a5, a6);
        if (r == 0 && skewed((clockid_t)a1) && a2 != 0) {
            struct timespec *ts = (struct timespec *)a2;
            *ts = ts_of(to_fake(ns_of(ts)));
        }
        return r;
    }
    if (active && number == SYS_clock_nanosleep && skewed((clockid_t)a1) && a3 != 0) {
        const struct timespec *req = (const struct timespec *)a3;
        struct timespec converted =
            ts_of(((int)a2 & TIMER_ABSTIME) ? to_real(ns_of(req)) : scale_wait(ns_of(req)));
        return real_syscall(number, a1, a2, (long)&converted, a4, a5, a6);
    }
    return real_syscall(number, a1, a2, a3, a4, a5, a6);
}

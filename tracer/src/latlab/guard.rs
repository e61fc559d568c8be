//! The C boundary: no panic of the tracer leaves a GStreamer hook.
//!
//! Every entry from C (the tracer hooks, the GObject `constructed`/`dispose`, the
//! `atexit` handler) runs its body through [`guarded`]. A Rust panic that reached the
//! `extern "C"` trampoline would abort the user's process; [`guarded`] catches it
//! instead, and the tracer then stops recording for good: the hooks return at once, the
//! writer closes the trace (its `END` chunk, and an `INFO` chunk `tracer_fault` saying
//! which hook failed and why), and the pipeline runs on as if it were not traced.
//!
//! What this cannot catch: a panic while a panic unwinds (a `Drop` that panics), and
//! aborts (an allocation failure). The streaming-thread path allocates nothing.
//!
//! For the tests that prove it (`tests/test_tracer_fuzz.py`), `LATLAB_TRACER_PANIC_AT=N`
//! makes the `N`th pad push (1-based) of the process panic inside its hook.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use super::recorder;
use super::CAT;

/// Set once a hook panicked: every hook is then a no-op.
static FAULTED: AtomicBool = AtomicBool::new(false);
/// The first fault: "HOOK: MESSAGE".
static FAULT: OnceLock<String> = OnceLock::new();
/// `LATLAB_TRACER_PANIC_AT`: the push that panics (0: none), and pushes counted so far.
static PANIC_AT: AtomicU64 = AtomicU64::new(0);
static PUSHES: AtomicU64 = AtomicU64::new(0);

/// Environment variable of the panic injection used by the tests.
pub const PANIC_AT_ENV: &str = "LATLAB_TRACER_PANIC_AT";

/// Runs `f` (the body of hook `hook`) unless the tracer faulted; a panic in it is
/// caught, logged once and turns the tracer off.
#[inline]
pub fn guarded(hook: &'static str, f: impl FnOnce()) {
    if FAULTED.load(Ordering::Relaxed) {
        return;
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        fault(hook, payload);
    }
}

/// Runs `f` also after a fault (closing the trace must still happen); a panic in it
/// is caught like [`guarded`]'s.
pub fn contained(what: &'static str, f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        fault(what, payload);
    }
}

/// The first fault, "HOOK: MESSAGE", if any.
pub fn fault_text() -> Option<&'static str> {
    FAULT.get().map(String::as_str)
}

/// Reads `LATLAB_TRACER_PANIC_AT` (at construction).
pub fn configure_injection() {
    let at = std::env::var(PANIC_AT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    PANIC_AT.store(at, Ordering::Relaxed);
}

/// Panics at the configured push (a test's fault injection; one relaxed load otherwise).
#[inline]
pub fn injection_point() {
    let at = PANIC_AT.load(Ordering::Relaxed);
    if at != 0 && PUSHES.fetch_add(1, Ordering::Relaxed) + 1 == at {
        panic!("{PANIC_AT_ENV}={at}: injected panic");
    }
}

#[cold]
#[inline(never)]
fn fault(hook: &'static str, payload: Box<dyn Any + Send>) {
    // Nothing here may unwind into C either.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        if FAULT.set(format!("{hook}: {message}")).is_ok() {
            FAULTED.store(true, Ordering::SeqCst);
            gst::error!(
                CAT,
                "internal error in the {hook} hook ({message}): latlab stops recording and \
                 closes its trace; the pipeline is not affected"
            );
            if let Some(rec) = recorder::installed() {
                rec.stop.store(true, Ordering::SeqCst);
                rec.pipe.wake();
            }
        }
    }));
    FAULTED.store(true, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_and_turns_the_hooks_off() {
        gst::init().unwrap();
        let mut ran = 0;
        guarded("test-before", || ran += 1);
        assert_eq!(ran, 1);
        guarded("test-hook", || panic!("boom {}", 7));
        assert!(FAULTED.load(Ordering::Relaxed));
        assert_eq!(fault_text(), Some("test-hook: boom 7"));
        guarded("test-after", || ran += 1);
        assert_eq!(ran, 1, "a faulted tracer runs no hook body");
    }
}

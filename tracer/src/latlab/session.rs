//! The recording session: opens the trace, makes the recorder, runs the writer thread,
//! and closes the trace at the end (or at exit). The recorder and the writer know
//! nothing of each other's start: this module ties them together.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::guard;
use super::recorder;
use super::settings::Settings;
use super::signals::WakePipe;
use super::writer::Writer;
use super::CAT;

/// How long closing the trace may take before it is left to the kernel.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// Opens the trace and starts the writer; `false` if nothing will be recorded.
pub fn start(settings: &Settings) -> bool {
    if recorder::installed().is_some() {
        gst::warning!(CAT, "already recording, ignoring another instance");
        return false;
    }
    let pid = std::process::id();
    let path = settings.output_path(pid);
    let writer = match Writer::open(
        &path,
        &settings.process_name(),
        pid,
        settings.stats_interval_ms(),
    ) {
        Ok(w) => w,
        Err(e) => {
            gst::error!(CAT, "cannot open {}: {e}", path.display());
            return false;
        }
    };
    let pipe = match WakePipe::new() {
        Ok(p) => p,
        Err(e) => {
            gst::error!(CAT, "cannot create a pipe: {e}");
            return false;
        }
    };
    let Some(rec) = recorder::install(settings, pid, pipe) else {
        return false;
    };
    let handle = std::thread::Builder::new()
        .name("latlab-writer".into())
        .spawn(move || {
            guard::contained("writer", || writer.run(rec));
            // After a panic in the writer nobody else would say the trace is done.
            rec.finished.store(true, Ordering::Release);
        });
    match handle {
        Ok(h) => rec.set_writer(h),
        Err(e) => {
            gst::error!(CAT, "cannot start the writer thread: {e}");
            rec.stop.store(true, Ordering::SeqCst);
            return false;
        }
    }
    rec.pipe.install_signal_handlers();
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
    gst::info!(
        CAT,
        "recording to {} (ring of {} records per streaming thread)",
        path.display(),
        rec.ring_capacity()
    );
    true
}

extern "C" fn at_exit() {
    guard::contained("atexit", shutdown);
}

/// Closes the trace: the writer drains every ring, writes `END` and stops.
///
/// Idempotent; waits at most a few seconds.
pub fn shutdown() {
    let Some(rec) = recorder::installed() else {
        return;
    };
    if rec.pid() != std::process::id() {
        return; // a forked child: the writer thread is not ours
    }
    rec.stop.store(true, Ordering::SeqCst);
    rec.pipe.wake();
    let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
    while !rec.finished.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    if rec.finished.load(Ordering::Acquire) {
        if let Some(h) = rec.take_writer() {
            let _ = h.join();
        }
    } else {
        gst::warning!(
            CAT,
            "the writer did not close the trace within {:?}",
            SHUTDOWN_TIMEOUT
        );
    }
}

//! The writer's wake-up pipe and the SIGINT/SIGTERM handler that uses it.
//!
//! The handler only writes the signal number to the pipe (async-signal-safe);
//! the writer thread then closes the trace, restores the default disposition
//! and re-raises the signal.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// Write end of the wake-up pipe, for the signal handler.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Signals whose default disposition the tracer takes over.
pub const HANDLED: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Byte written to wake the writer without a signal.
pub const WAKE: u8 = 0;

/// A non-blocking pipe used to wake the writer thread.
pub struct WakePipe {
    read_fd: libc::c_int,
    write_fd: libc::c_int,
}

impl WakePipe {
    /// Creates the pipe (both ends non-blocking and close-on-exec).
    pub fn new() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(WakePipe {
            read_fd: fds[0],
            write_fd: fds[1],
        })
    }

    /// Wakes the writer.
    pub fn wake(&self) {
        write_byte(self.write_fd, WAKE);
    }

    /// Waits up to `timeout_ms` for bytes; returns the signal received, if any.
    pub fn wait(&self, timeout_ms: i32) -> Option<libc::c_int> {
        let mut pfd = libc::pollfd {
            fd: self.read_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n <= 0 {
            return None;
        }
        let mut buf = [0u8; 64];
        let mut signal = None;
        loop {
            // SAFETY: reading into a local buffer of the given size.
            let got = unsafe { libc::read(self.read_fd, buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                break;
            }
            let got = got as usize;
            signal = buf[..got]
                .iter()
                .rev()
                .find(|&&b| b != WAKE)
                .map(|&b| b as libc::c_int)
                .or(signal);
        }
        signal
    }

    /// Installs the handler for each of [`HANDLED`] whose disposition is the default.
    ///
    /// Called at start and again periodically by the writer.
    pub fn install_signal_handlers(&self) {
        WAKE_FD.store(self.write_fd, Ordering::SeqCst);
        for sig in HANDLED {
            // SAFETY: querying and setting dispositions with zeroed, filled-in structs.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction != libc::SIG_DFL
                {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    }
}

/// Restores the default disposition of `sig` and sends it to the process again.
pub fn reraise(sig: libc::c_int) {
    // SAFETY: plain libc calls with valid arguments.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: errno is saved and restored; write(2) is async-signal-safe.
    unsafe {
        let errno = *libc::__errno_location();
        write_byte(WAKE_FD.load(Ordering::Relaxed), sig as u8);
        *libc::__errno_location() = errno;
    }
}

fn write_byte(fd: libc::c_int, byte: u8) {
    if fd >= 0 {
        // SAFETY: writes one byte from a local; failure (full pipe) is harmless.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_is_not_a_signal() {
        let p = WakePipe::new().unwrap();
        assert_eq!(p.wait(0), None);
        p.wake();
        assert_eq!(p.wait(100), None);
        write_byte(p.write_fd, libc::SIGTERM as u8);
        p.wake();
        assert_eq!(p.wait(100), Some(libc::SIGTERM));
    }
}

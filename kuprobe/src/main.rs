//! `latlab-kuprobe`: kernel-to-application latency of received UDP packets.
//!
//! Receives UDP on a port with software receive timestamps (`SO_TIMESTAMPING`,
//! `SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE`) and records, per
//! packet, the kernel's receive time and the instant `recvmsg` returned to the
//! reader, both on CLOCK_MONOTONIC, plus the RTP SSRC, sequence number and
//! timestamp when the payload is RTP. The kernel stamps on CLOCK_REALTIME; each
//! packet's stamp is moved to CLOCK_MONOTONIC with the offset of a paired reading
//! taken right after the read (realtime between two monotonic reads at most 2 µs
//! apart; when a preemption widens every try, the previous packet's offset is used).
//!
//! Events go to a latlab trace file `LATLAB_TRACE_DIR/LATLAB_PROCESS-PID.lltrace`:
//! pad `kernel:src` (a source element) pushes each packet at the kernel's time into
//! the sink element `app`, which renders it (`done`) at the read time. Prints
//! `ready` once the kernel stamps its packets; SIGINT or SIGTERM close the trace cleanly.

mod trace;

use std::io::{self, Write};
use std::mem;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;

use lltrace::clock::{monotonic_ns, realtime_ns};
use lltrace::{kind, Record, RtpHeader};
use trace::{packet_record, TraceWriter, THREAD_IDX};

const FLUSH_NS: u64 = 100_000_000;
const BATCH: usize = 4096; // records
const MAX_PACKET: usize = 65536;
const PAIR_MAX_NS: u64 = 2_000;
const WARMUP_MARKER: &[u8] = b"latlab-kuprobe warm-up";
const WARMUP_TRIES: usize = 2000; // 1 ms apart

const PAIR_TRIES: usize = 4;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

struct Args {
    port: u16,
    bind: std::net::Ipv4Addr,
}

fn parse_args() -> Result<Args, String> {
    let mut port = None;
    let mut bind = std::net::Ipv4Addr::UNSPECIFIED;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--port" => {
                let v = value("--port")?;
                port = Some(v.parse().map_err(|_| format!("bad port '{v}'"))?);
            }
            "--bind" => {
                let v = value("--bind")?;
                bind = v.parse().map_err(|_| format!("bad IPv4 address '{v}'"))?;
            }
            "-h" | "--help" => {
                return Err("usage: latlab-kuprobe --port PORT [--bind IPV4]".into());
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Args {
        port: port.ok_or("--port is required")?,
        bind,
    })
}

fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn setsockopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, value: &T) -> bool {
    // SAFETY: value points to a T of the given size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            mem::size_of::<T>() as libc::socklen_t,
        ) == 0
    }
}

/// A UDP socket bound to the port, with software receive timestamps and a 100 ms timeout.
fn open_socket(args: &Args) -> Result<libc::c_int, String> {
    // SAFETY: plain socket calls with valid arguments; the fd is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_error("socket"));
    }
    let flags: libc::c_int =
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    if !setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags) {
        return Err(os_error("setsockopt(SO_TIMESTAMPING)"));
    }
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    if !setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout) {
        return Err(os_error("setsockopt(SO_RCVTIMEO)"));
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: args.port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(args.bind).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: addr is a valid sockaddr_in of the given size.
    let rc = unsafe {
        libc::bind(
            fd,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(os_error(&format!("bind {}:{}", args.bind, args.port)));
    }
    Ok(fd)
}

fn install_signal_handlers() {
    for signum in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic; no SA_RESTART so recvmsg returns.
        unsafe {
            let mut action: libc::sigaction = mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signum, &action, std::ptr::null_mut());
        }
    }
}

/// One received packet: its size, the kernel's software stamp (CLOCK_REALTIME ns).
struct Received {
    size: usize,
    kernel_realtime_ns: Option<u64>,
}

/// Receive one packet into `buf` with its control messages.
fn receive(fd: libc::c_int, buf: &mut [u8], control: &mut [u64]) -> Option<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: msg points to valid buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = mem::size_of_val(control) as _;
    // SAFETY: fd is a socket and msg is initialised.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return None;
    }
    Some(Received {
        size: n as usize,
        kernel_realtime_ns: software_stamp(&msg),
    })
}

/// The software receive time (`scm_timestamping.ts[0]`) among the control messages.
fn software_stamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: walking the control buffer the kernel filled, with the CMSG macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPING {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                    return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

/// Wait until the kernel stamps received packets: enabling timestamping switches on a
/// static key in a deferred work item, so the first packets after `setsockopt` can
/// arrive without a stamp. Sends marker packets to the probe's own port over the local
/// address until one comes back stamped (other packets meanwhile are not recorded).
fn wait_stamping(fd: libc::c_int, args: &Args) -> Result<(), String> {
    let target = if args.bind.is_unspecified() {
        std::net::Ipv4Addr::LOCALHOST
    } else {
        args.bind
    };
    let sender = std::net::UdpSocket::bind((target, 0)).map_err(|e| format!("warm-up: {e}"))?;
    let mut buf = vec![0u8; MAX_PACKET];
    let mut control = [0u64; 64];
    for _ in 0..WARMUP_TRIES {
        sender
            .send_to(WARMUP_MARKER, (target, args.port))
            .map_err(|e| format!("warm-up send: {e}"))?;
        while let Some(packet) = receive(fd, &mut buf, &mut control) {
            if &buf[..packet.size] == WARMUP_MARKER {
                if packet.kernel_realtime_ns.is_some() {
                    return Ok(());
                }
                break;
            }
        }
        if STOP.load(Ordering::SeqCst) {
            return Err("stopped before receive timestamps were enabled".into());
        }
        thread::sleep(std::time::Duration::from_millis(1));
    }
    Err("the kernel gives no software receive timestamps".into())
}

fn trace_path(process: &str, pid: u32) -> PathBuf {
    let dir = std::env::var_os("LATLAB_TRACE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    dir.join(format!("{process}-{pid}.lltrace"))
}

fn open_trace(process: &str, pid: u32, tid: u32) -> Result<(TraceWriter, PathBuf), String> {
    let path = trace_path(process, pid);
    let start = monotonic_ns();
    let realtime = realtime_ns();
    let mut writer =
        TraceWriter::create(&path, pid, start).map_err(|e| format!("{}: {e}", path.display()))?;
    let cmdline: Vec<String> = std::env::args().collect();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let (rt, mono) = (realtime.to_string(), start.to_string());
    writer
        .info(&[
            ("process", process),
            ("hostname", hostname.trim()),
            (
                "tracer_version",
                concat!("kuprobe ", env!("CARGO_PKG_VERSION")),
            ),
            ("cmdline", &cmdline.join(" ")),
            ("realtime_ns", &rt),
            ("monotonic_ns", &mono),
        ])
        .and_then(|_| writer.thread(THREAD_IDX, tid, "kuprobe"))
        .and_then(|_| writer.pad(&trace::probe_pad()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((writer, path))
}

/// Counts reported at exit.
#[derive(Default)]
struct Counts {
    packets: u64,
    rtp: u64,
    unstamped: u64,
}

fn run(args: &Args) -> Result<Counts, String> {
    let process = std::env::var("LATLAB_PROCESS").unwrap_or_else(|_| "kuprobe".into());
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let fd = open_socket(args)?;
    let (mut writer, path) = open_trace(&process, pid, tid)?;
    install_signal_handlers();
    wait_stamping(fd, args)?;
    let (tx, rx) = mpsc::channel::<Vec<Record>>();
    let writer_thread = thread::Builder::new()
        .name("kuprobe-writer".into())
        .spawn(move || -> io::Result<TraceWriter> {
            for batch in rx {
                writer.events(&batch)?;
            }
            Ok(writer)
        })
        .map_err(|e| format!("writer thread: {e}"))?;
    println!("ready: listening on udp {}:{}", args.bind, args.port);
    let _ = io::stdout().flush();

    let counts = receive_loop(fd, &tx)?;
    drop(tx);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    let writer = writer_thread
        .join()
        .map_err(|_| "writer thread panicked".to_string())?
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writer
        .finish(monotonic_ns())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(counts)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC from a paired reading (realtime between two
/// monotonic reads at most PAIR_MAX_NS apart, so a preemption cannot skew it); None
/// if no narrow pair was found in a few tries.
fn realtime_offset() -> Option<i128> {
    for _ in 0..PAIR_TRIES {
        let before = monotonic_ns();
        let realtime = realtime_ns();
        let after = monotonic_ns();
        if after - before <= PAIR_MAX_NS {
            return Some(realtime as i128 - (before as i128 + after as i128) / 2);
        }
    }
    None
}

fn receive_loop(fd: libc::c_int, tx: &mpsc::Sender<Vec<Record>>) -> Result<Counts, String> {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut control = [0u64; 64];
    let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
    let mut counts = Counts::default();
    let mut last_flush = monotonic_ns();
    let mut offset = realtime_offset().ok_or("cannot pair CLOCK_REALTIME with CLOCK_MONOTONIC")?;
    while !STOP.load(Ordering::SeqCst) {
        let got = receive(fd, &mut buf, &mut control);
        let read_ns = monotonic_ns();
        if let Some(packet) = got {
            offset = realtime_offset().unwrap_or(offset);
            counts.packets += 1;
            let rtp = RtpHeader::parse(&buf[..packet.size]);
            counts.rtp += rtp.is_some() as u64;
            match packet.kernel_realtime_ns {
                Some(kernel_rt) => {
                    let kernel_mono = (kernel_rt as i128 - offset) as u64;
                    let size = packet.size as u32;
                    batch.push(packet_record(kernel_mono, kind::PUSH, size, rtp.as_ref()));
                    batch.push(packet_record(read_ns, kind::DONE, size, rtp.as_ref()));
                }
                None => counts.unstamped += 1,
            }
        } else {
            let err = io::Error::last_os_error();
            if !matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) {
                return Err(format!("recvmsg: {err}"));
            }
        }
        if read_ns.saturating_sub(last_flush) >= FLUSH_NS && !batch.is_empty() {
            let full = mem::replace(&mut batch, Vec::with_capacity(BATCH));
            tx.send(full)
                .map_err(|_| "writer thread ended".to_string())?;
            last_flush = read_ns;
        }
    }
    if !batch.is_empty() {
        tx.send(batch)
            .map_err(|_| "writer thread ended".to_string())?;
    }
    Ok(counts)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("latlab-kuprobe: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(counts) => {
            eprintln!(
                "latlab-kuprobe: {} packets ({} RTP), {} without a kernel timestamp",
                counts.packets, counts.rtp, counts.unstamped
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("latlab-kuprobe: {message}");
            ExitCode::FAILURE
        }
    }
}

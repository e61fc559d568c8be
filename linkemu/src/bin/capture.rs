//! latlab-capture: every packet a host sends or receives, with the kernel's timestamps.
//!
//! ```text
//! latlab-capture --name HOST --log LOG.lllink --stats STATS.json
//! ```
//!
//! Run inside the host's network namespace (e.g. an SFU's). One AF_PACKET socket sees
//! every interface but loopback; each frame becomes one link-log record
//! (`docs/link-log-format.md`): direction 0 = received by the host, 1 = sent by it, and
//! `arrival_ns` = `released_ns` = the kernel's timestamp of the frame (taken as it
//! entered the stack, or as it reached the device on its way out), moved from
//! CLOCK_REALTIME to CLOCK_MONOTONIC by an offset re-measured every second. Ingress and
//! egress therefore share one clock: the time between them needs no conversion at all.
//! Prints `ready` once capturing; stops on SIGINT or SIGTERM and then writes STATS
//! (frames, kernel drops, frames without a kernel timestamp, the clock offsets).

use std::fs::File;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use latlab_linkemu::log::{self, LogRings, Record, VERDICT_DELIVERED};
use latlab_linkemu::net::{self, CaptureSocket, Control};
use latlab_linkemu::{args, rt};
use lltrace::clock::{monotonic_ns, realtime_ns};
use lltrace::Spsc;

const USAGE: &str = "usage: latlab-capture --name HOST --log LOG.lllink --stats STATS.json";
/// Records the writer may fall behind by (about 10 s at 50 000 packets/s).
const LOG_RING: usize = 1 << 19;
const FRAME_BUFFER: usize = 2048;

struct Args {
    name: String,
    log: String,
    stats: String,
}

fn parse_args() -> Result<Args, String> {
    let (mut name, mut log, mut stats) = (None, None, None);
    for (flag, value) in args::flag_values(USAGE)? {
        match flag.as_str() {
            "--name" => name = Some(value),
            "--log" => log = Some(value),
            "--stats" => stats = Some(value),
            _ => return Err(format!("unknown option {flag}; {USAGE}")),
        }
    }
    let missing = |what: &str| format!("missing {what}; {USAGE}");
    Ok(Args {
        name: name.ok_or_else(|| missing("--name"))?,
        log: log.ok_or_else(|| missing("--log"))?,
        stats: stats.ok_or_else(|| missing("--stats"))?,
    })
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, from the tightest of nine bracketed reads.
fn realtime_offset_ns() -> i64 {
    let mut best = (u64::MAX, 0i64);
    for _ in 0..9 {
        let before = monotonic_ns();
        let real = realtime_ns();
        let after = monotonic_ns();
        let width = after - before;
        if width < best.0 {
            best = (width, real as i64 - (before + width / 2) as i64);
        }
    }
    best.1
}

/// What the capture thread counted.
#[derive(Default)]
struct Counts {
    frames: u64,
    without_kernel_timestamp: u64,
}

/// The packet path: receive, stamp, inspect, queue. Nothing here allocates, locks,
/// formats or writes; the record goes to a preallocated ring the writer thread drains.
fn capture(sock: &CaptureSocket, offset: &AtomicI64, logs: &LogRings, stop: &AtomicBool) -> Counts {
    let mut buf = [0u8; FRAME_BUFFER];
    let mut control: Control = [0; 8];
    let mut ids = [0u32; 2];
    let mut counts = Counts::default();
    while !stop.load(Ordering::Acquire) {
        let Some(frame) = sock.recv(&mut buf, &mut control) else {
            continue;
        };
        let at = match frame.realtime_ns {
            Some(real) => (real as i64 - offset.load(Ordering::Relaxed)) as u64,
            None => {
                counts.without_kernel_timestamp += 1;
                rt::now_ns()
            }
        };
        let direction = u8::from(frame.outgoing);
        let mut rec = Record {
            arrival_ns: at,
            released_ns: at,
            size: frame.len as u32,
            direction,
            verdict: VERDICT_DELIVERED,
            packet_id: ids[usize::from(direction)],
            ..Record::default()
        };
        ids[usize::from(direction)] = ids[usize::from(direction)].wrapping_add(1);
        net::inspect(&buf[..frame.len.min(FRAME_BUFFER)], &mut rec);
        logs.put(0, rec);
        counts.frames += 1;
    }
    counts
}

fn info_json(args: &Args, start_ns: u64, offset_ns: i64) -> String {
    serde_json::json!({
        "program": "latlab-capture",
        "version": env!("CARGO_PKG_VERSION"),
        "name": args.name,
        "between": [args.name, "network"],
        "directions": {"0": format!("received by {}", args.name),
                       "1": format!("sent by {}", args.name)},
        "start_ns": start_ns,
        "clock": "kernel timestamps (CLOCK_REALTIME) less realtime_minus_monotonic_ns",
        "realtime_minus_monotonic_ns": offset_ns,
    })
    .to_string()
}

/// Wait for SIGINT/SIGTERM, re-measuring the clock offset every second; the largest
/// change seen from the first offset.
fn wait_refreshing_offset(set: &libc::sigset_t, offset: &AtomicI64, first: i64) -> i64 {
    let second = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    let mut largest = 0i64;
    loop {
        // SAFETY: `set` is initialised; a null siginfo is allowed.
        let got = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &second) };
        let now = realtime_offset_ns();
        offset.store(now, Ordering::Relaxed);
        largest = largest.max((now - first).abs());
        if got > 0 {
            return largest;
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let signals = rt::block_stop_signals();
    let sock = CaptureSocket::open()?;
    let mut file =
        File::create(&args.log).map_err(|e| format!("cannot create log {}: {e}", args.log))?;
    let first = realtime_offset_ns();
    let offset = Arc::new(AtomicI64::new(first));
    let start_ns = monotonic_ns();
    log::write_header(&mut file, start_ns, &info_json(&args, start_ns, first))
        .map_err(|e| format!("cannot write log {}: {e}", args.log))?;
    let logs = Arc::new(LogRings {
        rings: vec![Arc::new(Spsc::new(LOG_RING))],
        lost: AtomicU64::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let writer_done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (logs, done) = (logs.clone(), writer_done.clone());
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || log::writer(file, logs, done))
            .map_err(|e| e.to_string())?
    };
    let sock = Arc::new(sock);
    let capturer = {
        let (sock, offset, logs, stop) = (sock.clone(), offset.clone(), logs.clone(), stop.clone());
        std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || capture(&sock, &offset, &logs, &stop))
            .map_err(|e| e.to_string())?
    };
    rt::lock_memory();
    println!("ready");
    let _ = std::io::stdout().flush();
    let largest_change = wait_refreshing_offset(&signals, &offset, first);

    stop.store(true, Ordering::Release);
    let counts = capturer.join().map_err(|_| "capture thread panicked")?;
    let kernel_drops = sock.drops();
    writer_done.store(true, Ordering::Release);
    match writer.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("writing log {}: {e}", args.log)),
        Err(_) => return Err("log writer panicked".into()),
    }
    let stats = serde_json::json!({
        "frames": counts.frames,
        "kernel_drops": kernel_drops,
        "records_lost": logs.lost.load(Ordering::Relaxed),
        "without_kernel_timestamp": counts.without_kernel_timestamp,
        "realtime_minus_monotonic_ns": {"first": first, "last": offset.load(Ordering::Relaxed),
                                        "largest_change": largest_change},
    });
    std::fs::write(&args.stats, stats.to_string() + "\n")
        .map_err(|e| format!("cannot write {}: {e}", args.stats))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latlab-capture: {e}");
            ExitCode::from(2)
        }
    }
}

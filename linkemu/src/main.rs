//! latlab-linkemu: a layer-2 link emulator between two interfaces.
//!
//! ```text
//! latlab-linkemu --iface-a IFA --iface-b IFB --config CONFIG.json --log LOG.lllink
//!                [--spin-us N] [--release-cpu CPU]
//! ```
//!
//! Frames arriving on IFA leave on IFB after the `forward` impairment, frames
//! arriving on IFB leave on IFA after the `reverse` one; non-IPv4 frames (ARP,
//! IPv6 neighbour discovery) pass at once. Per direction, a receive thread applies
//! the model and a release thread sends each packet at its scheduled
//! CLOCK_MONOTONIC instant (absolute-deadline sleep, then a short spin). Prints
//! `ready` once both sockets are bound; stops cleanly on SIGINT or SIGTERM.

use std::fs::File;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use latlab_linkemu::config::Config;
use latlab_linkemu::lane::{self, Lane};
use latlab_linkemu::net::PacketSocket;
use latlab_linkemu::{args, log, model, rt};
use lltrace::Spsc;

struct Args {
    iface_a: String,
    iface_b: String,
    config: String,
    log: String,
    spin_ns: u64,
    release_cpu: Option<usize>,
}

const USAGE: &str =
    "usage: latlab-linkemu --iface-a IFA --iface-b IFB --config CONFIG.json --log LOG.lllink [--spin-us N] [--release-cpu CPU]";

fn parse_args() -> Result<Args, String> {
    let (mut a, mut b, mut config, mut log) = (None, None, None, None);
    let mut spin_ns = lane::DEFAULT_SPIN_NS;
    let mut release_cpu = None;
    for (flag, value) in args::flag_values(USAGE)? {
        match flag.as_str() {
            "--iface-a" => a = Some(value),
            "--iface-b" => b = Some(value),
            "--config" => config = Some(value),
            "--log" => log = Some(value),
            "--spin-us" => {
                let us: u64 = value
                    .parse()
                    .map_err(|_| format!("--spin-us: not a number: {value}"))?;
                spin_ns = us * 1000;
            }
            "--release-cpu" => {
                let cpu: usize = value
                    .parse()
                    .map_err(|_| format!("--release-cpu: not a CPU number: {value}"))?;
                release_cpu = Some(cpu);
            }
            _ => return Err(format!("unknown option {flag}; {USAGE}")),
        }
    }
    let missing = |name: &str| format!("missing {name}; {USAGE}");
    Ok(Args {
        iface_a: a.ok_or_else(|| missing("--iface-a"))?,
        iface_b: b.ok_or_else(|| missing("--iface-b"))?,
        config: config.ok_or_else(|| missing("--config"))?,
        log: log.ok_or_else(|| missing("--log"))?,
        spin_ns,
        release_cpu,
    })
}

fn info_json(args: &Args, config_text: &str, start_ns: u64, parsed: &Config) -> String {
    let config: serde_json::Value = serde_json::from_str(config_text).unwrap_or_default();
    serde_json::json!({
        "program": "latlab-linkemu",
        "version": env!("CARGO_PKG_VERSION"),
        "name": parsed.name,
        "between": parsed.between,
        "iface_a": args.iface_a,
        "iface_b": args.iface_b,
        "directions": {"0": "forward: a -> b", "1": "reverse: b -> a"},
        "start_ns": start_ns,
        "spin_ns": args.spin_ns,
        "slot_size": lane::SLOT_SIZE,
        "config": config,
    })
    .to_string()
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let text = std::fs::read_to_string(&args.config)
        .map_err(|e| format!("cannot read config {}: {e}", args.config))?;
    let config = Config::parse(&text).map_err(|e| format!("config {}: {e}", args.config))?;
    let signals = rt::block_stop_signals();
    let sock_a = Arc::new(PacketSocket::open(&args.iface_a)?);
    let sock_b = Arc::new(PacketSocket::open(&args.iface_b)?);
    let mut file =
        File::create(&args.log).map_err(|e| format!("cannot create log {}: {e}", args.log))?;
    let start_ns = rt::now_ns();
    let info = info_json(&args, &text, start_ns, &config);
    log::write_header(&mut file, start_ns, &info)
        .map_err(|e| format!("cannot write log {}: {e}", args.log))?;

    let logs = Arc::new(log::LogRings {
        rings: (0..4)
            .map(|_| Arc::new(Spsc::new(lane::LOG_RING)))
            .collect(),
        lost: AtomicU64::new(0),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let forward = Arc::new(Lane::new(0, sock_a.clone(), sock_b.clone()));
    let reverse = Arc::new(Lane::new(1, sock_b, sock_a));
    rt::lock_memory();
    let mut threads = Vec::new();
    for (lane, imp, reverse_dir) in [
        (&forward, config.forward, false),
        (&reverse, config.reverse, true),
    ] {
        let seed = config
            .seed
            .wrapping_mul(2)
            .wrapping_add(u64::from(reverse_dir));
        let model = model::Model::new(imp, seed);
        let schedule = config.schedule_for(reverse_dir);
        threads.push(lane::spawn_receiver(
            lane.clone(),
            model,
            schedule,
            start_ns,
            logs.clone(),
            stop.clone(),
        ));
        threads.push(lane::spawn_releaser(
            lane.clone(),
            logs.clone(),
            args.spin_ns,
            args.release_cpu,
        ));
    }
    let writer_done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (logs, done) = (logs.clone(), writer_done.clone());
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || log::writer(file, logs, done))
            .map_err(|e| e.to_string())?
    };

    println!("ready");
    let _ = std::io::stdout().flush();
    rt::wait_for_stop_signal(&signals);

    stop.store(true, Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    writer_done.store(true, Ordering::Release);
    match writer.join() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing log {}: {e}", args.log)),
        Err(_) => Err("log writer panicked".into()),
    }
}

/// A panic in any thread ends the process, as `panic = "abort"` did before the crates
/// shared one release profile (the tracer's must unwind): a lane thread that died
/// must not leave the emulator running without it.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

fn main() -> ExitCode {
    abort_on_panic();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latlab-linkemu: {e}");
            ExitCode::from(2)
        }
    }
}

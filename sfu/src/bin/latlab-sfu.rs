//! `latlab-sfu`: latlab's reference SFU (docs/sfu.md, "latlab-sfu").
//!
//! ```text
//! latlab-sfu --bind IPV4 [--http-port N] [--udp-port N] [--trace FILE]
//!            [--batch N] [--no-batch] [--no-pool] [--no-gso] [--max-peers N]
//!            [--pace] [--bwe-initial-kbps N] [--log LEVEL]
//! latlab-sfu --version
//! ```
//!
//! WebRTC through str0m in RTP mode: publishers join a room with WHIP
//! (`POST /whip/ROOM`), subscribers with WHEP (`POST /whep/ROOM`), the page at `/`
//! does either from a browser. One thread forwards every packet; signalling has its
//! own thread that only passes SDP strings. It binds only the address given: TCP
//! `--http-port` and UDP `--udp-port` (every peer on that one port). Prints one
//! `ready` line on stdout once both are bound; SIGINT or SIGTERM stop it, and it says
//! what it did on stderr.

use std::io::Write;
use std::net::SocketAddrV4;
use std::process::ExitCode;
use std::sync::Arc;

use latlab_sfu::{alloc, args, http, logger, net, probe, sfu};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn run(cfg: args::Config) -> Result<(), String> {
    let mut sock = net::Socket::bind(SocketAddrV4::new(cfg.bind, cfg.udp_port))?;
    if cfg.trace.is_some() {
        // The probes' egress instant from the kernel too (software transmit stamps).
        sock.enable_tx_stamps();
    }
    let waker = Arc::new(net::Waker::new()?);
    let requests = http::start(cfg.bind, cfg.http_port, waker.clone())?;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let probes = match &cfg.trace {
        Some(path) => {
            let process = std::env::var("LATLAB_PROCESS").unwrap_or_else(|_| "sfu".into());
            Some(probe::Probes::start(path, &process, tid)?)
        }
        None => None,
    };
    let mut sfu = sfu::Sfu::new(cfg.clone(), sock, waker, requests, probes)?;
    sfu::install_stop_handlers();
    println!(
        "ready: http {}:{} udp {}:{} batch {} pool {} gso {} kernel-stamps {} trace {}{}",
        cfg.bind,
        cfg.http_port,
        cfg.bind,
        cfg.udp_port,
        if cfg.batched { cfg.batch } else { 1 },
        if cfg.pool { "on" } else { "off" },
        if sfu.gso() { "on" } else { "off" },
        if sfu.kernel_stamps() { "on" } else { "off" },
        cfg.trace
            .as_ref()
            .map_or("off".to_string(), |p| p.display().to_string()),
        if sfu.tx_stamps() {
            " (kernel tx stamps)"
        } else {
            ""
        },
    );
    let _ = std::io::stdout().flush();
    let allocs_before = alloc::count();
    let result = sfu.run();
    let dropped = sfu.finish_probes()?;
    let c = sfu.counts;
    let n = sfu.net;
    log::info!(
        "stopped: {} RTP packets in, {} forwarded, {} datagrams in ({} receive calls), \
         {} out ({} send calls, {} GSO messages, {} dropped), {} layer switches, \
         {} allocations, {} wake-ups, {} probe records dropped",
        c.rtp_in,
        c.forwarded,
        n.datagrams_in,
        n.recv_calls,
        n.datagrams_out,
        n.send_calls,
        n.gso_messages,
        n.send_dropped,
        c.layer_switches,
        alloc::count() - allocs_before,
        c.wakeups,
        dropped
    );
    result
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("latlab-sfu {} (str0m 0.25)", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let cfg = match args::parse(std::env::args().skip(1)) {
        Ok(cfg) => cfg,
        Err(message) => {
            eprintln!("latlab-sfu: {message}");
            return ExitCode::from(2);
        }
    };
    logger::init(cfg.log);
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::error!("panic at {at}: {what}");
    }));
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("latlab-sfu: {message}");
            ExitCode::FAILURE
        }
    }
}

//! `latlab-sfu-load`: light WebRTC participants (WHIP publishers, WHEP subscribers) as
//! load on latlab-sfu, for its benchmark and robustness tests (`latlab_sfu::load`).
//!
//! ```text
//! latlab-sfu-load --sfu IP:PORT --media IP:PORT [--bind IPV4] [--room NAME]
//!                 [--publishers N] [--subscribers N] [--seconds S]
//!                 [--layers-kbps A,B,C] [--fps N] [--garbage-pps N] [--churn N]
//!                 [--name PREFIX]
//! ```
//!
//! Prints `ready` once every participant is connected and media flows, then, after
//! `--seconds` (or SIGINT/SIGTERM), one `summary {json}` line: packets sent and
//! received, the one-way delay publisher -> subscriber (p50/p90/p99, µs), malformed
//! datagrams sent, join/leave cycles.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use latlab_sfu::load::{self, LoadConfig};

const USAGE: &str = "usage: latlab-sfu-load --sfu IP:PORT --media IP:PORT [--bind IPV4] \
                     [--room NAME] [--publishers N] [--subscribers N] [--seconds S] \
                     [--layers-kbps A,B,C] [--fps N] [--garbage-pps N] [--churn N] [--name PREFIX]";

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn parse() -> Result<LoadConfig, String> {
    let mut c = LoadConfig::default();
    let mut args = std::env::args().skip(1);
    let (mut sfu, mut media) = (false, false);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        let bad = |what: &str| format!("{flag}: not {what}: {value}");
        match flag.as_str() {
            "--sfu" => {
                c.sfu = value.parse().map_err(|_| bad("IPV4:PORT"))?;
                sfu = true;
            }
            "--media" => {
                c.media = value.parse().map_err(|_| bad("IPV4:PORT"))?;
                media = true;
            }
            "--bind" => c.bind = value.parse().map_err(|_| bad("an IPv4 address"))?,
            "--room" => c.room = value,
            "--name" => c.name = value,
            "--publishers" => c.publishers = value.parse().map_err(|_| bad("a number"))?,
            "--subscribers" => c.subscribers = value.parse().map_err(|_| bad("a number"))?,
            "--seconds" => c.seconds = value.parse().map_err(|_| bad("a number"))?,
            "--fps" => c.fps = value.parse().map_err(|_| bad("a number"))?,
            "--garbage-pps" => c.garbage_pps = value.parse().map_err(|_| bad("a number"))?,
            "--churn" => c.churn = value.parse().map_err(|_| bad("a number"))?,
            "--layers-kbps" => {
                let v: Result<Vec<u32>, _> = value.split(',').map(str::parse).collect();
                c.layers_kbps = v.map_err(|_| bad("kbps,kbps,..."))?;
                if c.layers_kbps.is_empty() || c.layers_kbps.len() > 4 {
                    return Err(format!("--layers-kbps: 1 to 4 layers, not {value}"));
                }
            }
            _ => return Err(format!("unknown argument {flag}; {USAGE}")),
        }
    }
    if !sfu || !media {
        return Err(format!("--sfu and --media are required; {USAGE}"));
    }
    Ok(c)
}

fn main() -> ExitCode {
    let cfg = match parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("latlab-sfu-load: {e}");
            return ExitCode::from(2);
        }
    };
    for signum in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(signum, on_stop as *const () as libc::sighandler_t) };
    }
    let stop = || STOP.load(Ordering::Relaxed);
    let mut ready = || {
        println!("ready");
        let _ = std::io::stdout().flush();
    };
    match load::run(&cfg, &stop, &mut ready) {
        Ok(summary) => {
            println!("summary {}", summary.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("latlab-sfu-load: {e}");
            ExitCode::FAILURE
        }
    }
}

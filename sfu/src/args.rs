//! The command line: every error is one line naming the argument.

use std::net::Ipv4Addr;
use std::path::PathBuf;

pub const USAGE: &str = "usage: latlab-sfu --bind IPV4 [--http-port N] [--udp-port N] \
                         [--trace FILE] [--batch N] [--no-batch] [--no-pool] [--no-gso] \
                         [--pace] [--bwe auto|on|off] [--hold-us N] [--timer-slack-us N] \
                         [--max-peers N] [--bwe-initial-kbps N] [--log LEVEL]";

/// Which subscribers get str0m's bandwidth estimator (TWCC feedback, GCC) and with it
/// its pacer, which releases one packet per timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BweMode {
    /// Those that may have a layer to choose: unless every publisher of the room, when
    /// the subscriber joins, sends one video layer (and there is one).
    Auto,
    /// Every subscriber.
    On,
    /// None: a leg carries the layer that fits `--bwe-initial-kbps`.
    Off,
}

/// What the SFU was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The only address it binds: HTTP (TCP) and media (UDP).
    pub bind: Ipv4Addr,
    pub http_port: u16,
    pub udp_port: u16,
    /// White-box probes: the trace file to write (off when `None`).
    pub trace: Option<PathBuf>,
    /// Datagrams per `recvmmsg`/`sendmmsg` call; 1 with `--no-batch` (then `recvmsg`/`sendmsg`).
    pub batch: usize,
    /// Batched syscalls (`--no-batch` turns them off).
    pub batched: bool,
    /// Packet buffers from the preallocated pool (`--no-pool`: one allocation per packet).
    pub pool: bool,
    /// UDP generic segmentation offload when the kernel has it (`--no-gso`).
    pub gso: bool,
    /// Pace forwarded video through str0m's leaky bucket (off: sent as it arrives); the
    /// bucket comes with the estimator, so every subscriber gets one.
    pub pace: bool,
    /// Which subscribers get a bandwidth estimator.
    pub bwe: BweMode,
    /// How long packets forwarded from a received batch may wait for the rest of the
    /// batch before they are sent (ns).
    pub hold_ns: u64,
    /// How late a timer may be serviced, so that timers due close together (and packets)
    /// share one wake-up (ns).
    pub timer_slack_ns: u64,
    /// Peers (publishers and subscribers) at most; more are refused with 503.
    pub max_peers: usize,
    /// A subscriber leg's first bandwidth estimate, before TWCC feedback says more.
    pub bwe_initial_kbps: u64,
    pub log: log::LevelFilter,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: Ipv4Addr::LOCALHOST,
            http_port: 8089,
            udp_port: 20000,
            trace: None,
            batch: 32,
            batched: true,
            pool: true,
            gso: true,
            pace: false,
            bwe: BweMode::Auto,
            hold_ns: 250_000,
            timer_slack_ns: 2_000_000,
            max_peers: 256,
            bwe_initial_kbps: 1000,
            log: log::LevelFilter::Info,
        }
    }
}

pub const MAX_BATCH: usize = 256;

fn number<T: std::str::FromStr>(flag: &str, value: &str, what: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: not {what}: {value}"))
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Config, String> {
    let mut c = Config::default();
    let mut bind = None;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--bind" => {
                let v = value()?;
                let addr: Ipv4Addr = number(&flag, &v, "an IPv4 address")?;
                if addr.is_unspecified() {
                    return Err(format!("--bind: give the one address to bind, not {addr}"));
                }
                bind = Some(addr);
            }
            "--http-port" => c.http_port = port(&flag, &value()?)?,
            "--udp-port" => c.udp_port = port(&flag, &value()?)?,
            "--trace" => {
                let v = value()?;
                if v.is_empty() {
                    return Err("--trace: empty file name".into());
                }
                c.trace = Some(PathBuf::from(v));
            }
            "--batch" => {
                let v = value()?;
                let n: usize = number(&flag, &v, "a number")?;
                if !(1..=MAX_BATCH).contains(&n) {
                    return Err(format!("--batch: {n} is not between 1 and {MAX_BATCH}"));
                }
                c.batch = n;
            }
            "--no-batch" => c.batched = false,
            "--no-pool" => c.pool = false,
            "--no-gso" => c.gso = false,
            "--pace" => c.pace = true,
            "--bwe" => {
                let v = value()?;
                c.bwe = match v.as_str() {
                    "auto" => BweMode::Auto,
                    "on" => BweMode::On,
                    "off" => BweMode::Off,
                    _ => return Err(format!("--bwe: not one of auto, on, off: {v}")),
                };
            }
            "--hold-us" => {
                let v = value()?;
                let n: u64 = number(&flag, &v, "a number")?;
                if n > 100_000 {
                    return Err(format!("--hold-us: {n} is more than 100000"));
                }
                c.hold_ns = n * 1000;
            }
            "--timer-slack-us" => {
                let v = value()?;
                let n: u64 = number(&flag, &v, "a number")?;
                if n > 20_000 {
                    return Err(format!("--timer-slack-us: {n} is more than 20000"));
                }
                c.timer_slack_ns = n * 1000;
            }
            "--max-peers" => {
                let v = value()?;
                let n: usize = number(&flag, &v, "a number")?;
                if !(1..=65536).contains(&n) {
                    return Err(format!("--max-peers: {n} is not between 1 and 65536"));
                }
                c.max_peers = n;
            }
            "--bwe-initial-kbps" => {
                let v = value()?;
                let n: u64 = number(&flag, &v, "a number")?;
                if !(30..=100_000).contains(&n) {
                    return Err(format!(
                        "--bwe-initial-kbps: {n} is not between 30 and 100000"
                    ));
                }
                c.bwe_initial_kbps = n;
            }
            "--log" => {
                let v = value()?;
                c.log = v.parse().map_err(|_| {
                    format!("--log: not one of off, error, warn, info, debug, trace: {v}")
                })?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {flag}; {USAGE}")),
        }
    }
    c.bind = bind.ok_or_else(|| format!("--bind is required; {USAGE}"))?;
    if !c.batched {
        c.batch = 1;
        c.gso = false;
    }
    if c.pace {
        if c.bwe == BweMode::Off {
            return Err("--pace needs the estimator (its pacer): not with --bwe off".into());
        }
        c.bwe = BweMode::On;
    }
    Ok(c)
}

fn port(flag: &str, value: &str) -> Result<u16, String> {
    let p: u16 = number(flag, value, "a port")?;
    if p == 0 {
        return Err(format!("{flag}: give a port, not 0"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Config, String> {
        parse(text.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_values() {
        let c = parsed("--bind 10.1.2.3 --http-port 81 --udp-port 5000 --trace t.lltrace").unwrap();
        assert_eq!(c.bind, Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!((c.http_port, c.udp_port), (81, 5000));
        assert_eq!(c.trace, Some(PathBuf::from("t.lltrace")));
        assert!(c.batched && c.pool && c.gso);
        assert_eq!(c.batch, 32);
        assert_eq!(c.bwe, BweMode::Auto);
        assert_eq!(
            parsed("--bind 10.0.0.1 --bwe off").unwrap().bwe,
            BweMode::Off
        );
        assert_eq!(parsed("--bind 10.0.0.1 --pace").unwrap().bwe, BweMode::On);
    }

    #[test]
    fn switches_turn_each_choice_off() {
        let c = parsed("--bind 10.0.0.1 --no-batch --no-pool").unwrap();
        assert!(!c.batched && !c.pool && !c.gso);
        assert_eq!(c.batch, 1);
        let c = parsed("--bind 10.0.0.1 --no-gso --batch 8").unwrap();
        assert!(c.batched && !c.gso);
        assert_eq!(c.batch, 8);
    }

    #[test]
    fn bad_arguments_are_one_line_naming_the_flag() {
        for (args, starts) in [
            ("", "--bind is required"),
            ("--bind", "--bind needs a value"),
            ("--bind 0.0.0.0", "--bind: give the one address"),
            ("--bind ::1", "--bind: not an IPv4 address"),
            (
                "--bind 10.0.0.1 --http-port x",
                "--http-port: not a port: x",
            ),
            ("--bind 10.0.0.1 --udp-port 0", "--udp-port: give a port"),
            ("--bind 10.0.0.1 --batch 0", "--batch: 0 is not between"),
            ("--bind 10.0.0.1 --log loud", "--log: not one of"),
            ("--bind 10.0.0.1 --bwe maybe", "--bwe: not one of"),
            (
                "--bind 10.0.0.1 --bwe off --pace",
                "--pace needs the estimator",
            ),
            (
                "--bind 10.0.0.1 --frobnicate",
                "unknown argument --frobnicate",
            ),
        ] {
            let e = parsed(args).unwrap_err();
            assert!(e.starts_with(starts), "{args:?} gave {e:?}");
            assert!(!e.contains('\n'), "{e:?} is not one line");
        }
    }
}

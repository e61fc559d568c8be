//! latlab-udpgen: send UDP datagrams carrying an RTP v2 header at a steady packet rate.
//!
//! ```text
//! latlab-udpgen --dst IP:PORT --pps N --count N [--size BYTES] [--ssrc N]
//! ```
//!
//! Packet `i` leaves at `start + i / pps` (absolute CLOCK_MONOTONIC sleeps), with RTP
//! sequence number `i mod 2^16` and timestamp `i`. At the end it prints one line:
//! `sent N in S s = R packets/s`.

use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;

use latlab_linkemu::{args, rt};
use lltrace::clock::monotonic_ns as now_ns;

struct Args {
    dst: SocketAddr,
    pps: f64,
    count: u64,
    size: usize,
    ssrc: u32,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        dst: "127.0.0.1:5004".parse().unwrap(),
        pps: 1000.0,
        count: 1000,
        size: 200,
        ssrc: 0x1a7e_0001,
    };
    for (flag, v) in args::flag_values("")? {
        let bad = format!("{flag}: bad value {v}");
        match flag.as_str() {
            "--dst" => args.dst = v.parse().map_err(|_| format!("--dst: bad address {v}"))?,
            "--pps" => args.pps = v.parse().map_err(|_| bad.clone())?,
            "--count" => args.count = v.parse().map_err(|_| bad.clone())?,
            "--size" => args.size = v.parse().map_err(|_| bad.clone())?,
            "--ssrc" => args.ssrc = v.parse().map_err(|_| bad.clone())?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.pps <= 0.0 || args.size < 12 {
        return Err("--pps must be > 0 and --size >= 12".into());
    }
    Ok(args)
}

fn run() -> Result<(), String> {
    let args = parse()?;
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    sock.connect(args.dst).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; args.size];
    buf[0] = 0x80;
    buf[1] = 96;
    buf[8..12].copy_from_slice(&args.ssrc.to_be_bytes());
    let period = 1e9 / args.pps;
    let start = now_ns() + 1_000_000;
    let mut sent = 0u64;
    for i in 0..args.count {
        rt::sleep_until(start + (i as f64 * period) as u64);
        buf[2..4].copy_from_slice(&(i as u16).to_be_bytes());
        buf[4..8].copy_from_slice(&(i as u32).to_be_bytes());
        if sock.send(&buf).is_ok() {
            sent += 1;
        }
    }
    let secs = (now_ns() - start) as f64 / 1e9;
    println!(
        "sent {sent} in {secs:.3} s = {:.1} packets/s",
        sent as f64 / secs
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latlab-udpgen: {e}");
            ExitCode::from(2)
        }
    }
}

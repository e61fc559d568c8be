//! latlab-relay: a forwarder whose every decision is known, to prove the SFU dwell matcher.
//!
//! ```text
//! latlab-relay --listen PORT --to IP:PORT[,IP:PORT...] --hold-us N
//!              [--layers SSRC,SSRC,...] [--switch-ms N]
//! ```
//!
//! Receives RTP on UDP `PORT` and sends every packet to each subscriber (`--to`) as an
//! SFU does: each leg has its own SSRC per source, its own sequence numbers and
//! timestamps (the source's plus a per-leg offset, re-based so the leg's numbering runs
//! on across a switch), a one-word header extension the source did not send, and a
//! payload scrambled per leg (as SRTP encrypts per leg). Of the `--layers` SSRCs (a
//! simulcast source) one is forwarded at a time, the next every `--switch-ms` (the legs
//! switch in turn); other SSRCs are always forwarded. Each packet is held `--hold-us`
//! after it was received (absolute CLOCK_MONOTONIC sleeps): the planted dwell.
//! Prints `ready` once bound; on SIGINT/SIGTERM prints the truth, a header line and one
//! line per packet sent: `received_ns,sent_ns,leg,in_ssrc,in_seq,out_ssrc,out_seq`
//! (CLOCK_MONOTONIC; `received_ns` when recv returned, `sent_ns` when send returned).
//! The packet path allocates nothing: packets wait in a preallocated ring and truth
//! lines in a preallocated table, formatted only at exit.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use latlab_linkemu::{args, rt};
use lltrace::clock::{monotonic_ns, timespec};

const USAGE: &str = "usage: latlab-relay --listen PORT --to IP:PORT[,IP:PORT...] --hold-us N \
                     [--layers SSRC,...] [--switch-ms N]";
const SLOTS: usize = 4096;
const MAX_PACKET: usize = 1600;
const MAX_TRUTH: usize = 1 << 21;
const MAX_SOURCES: usize = 16;

struct Args {
    listen: u16,
    to: Vec<SocketAddr>,
    hold_ns: u64,
    layers: Vec<u32>,
    switch_ns: u64,
}

fn parse_args() -> Result<Args, String> {
    let (mut listen, mut to, mut hold_ns) = (None, None, None);
    let (mut layers, mut switch_ns) = (Vec::new(), 1_000_000_000);
    for (flag, value) in args::flag_values(USAGE)? {
        let bad = |what: &str| format!("{flag}: not {what}: {value}");
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|_| bad("a port"))?),
            "--to" => {
                let parsed: Result<Vec<SocketAddr>, _> = value.split(',').map(str::parse).collect();
                to = Some(parsed.map_err(|_| bad("IP:PORT[,IP:PORT...]"))?);
            }
            "--hold-us" => {
                hold_ns = Some(value.parse::<u64>().map_err(|_| bad("a number"))? * 1000)
            }
            "--layers" => {
                let parsed: Result<Vec<u32>, _> = value.split(',').map(str::parse).collect();
                layers = parsed.map_err(|_| bad("SSRC,SSRC,... (decimal)"))?;
            }
            "--switch-ms" => {
                switch_ns = value.parse::<u64>().map_err(|_| bad("a number"))? * 1_000_000
            }
            _ => return Err(format!("unknown option {flag}; {USAGE}")),
        }
    }
    let missing = |what: &str| format!("missing {what}; {USAGE}");
    Ok(Args {
        listen: listen.ok_or_else(|| missing("--listen"))?,
        to: to.ok_or_else(|| missing("--to"))?,
        hold_ns: hold_ns.ok_or_else(|| missing("--hold-us"))?,
        layers,
        switch_ns: switch_ns.max(1),
    })
}

/// One packet waiting for its release.
#[derive(Clone, Copy)]
struct Slot {
    received_ns: u64,
    len: usize,
    data: [u8; MAX_PACKET],
}

/// One leg's numbering of one source class (the layers share one: a switch re-bases it).
#[derive(Clone, Copy, Default)]
struct Numbering {
    started: bool,
    source: u32,
    seq_offset: u16,
    ts_offset: u32,
    last_seq: u16,
    last_ts: u32,
}

impl Numbering {
    /// The outgoing (seq, ts) of a packet of `source`; a new source re-bases the offsets
    /// so the leg's numbering continues one packet and one frame (3000) on.
    fn map(&mut self, source: u32, seq: u16, ts: u32, first_seq: u16, first_ts: u32) -> (u16, u32) {
        if !self.started {
            self.started = true;
            self.source = source;
            self.seq_offset = first_seq.wrapping_sub(seq);
            self.ts_offset = first_ts.wrapping_sub(ts);
        } else if self.source != source {
            self.source = source;
            self.seq_offset = self.last_seq.wrapping_add(1).wrapping_sub(seq);
            self.ts_offset = self.last_ts.wrapping_add(3000).wrapping_sub(ts);
        }
        self.last_seq = seq.wrapping_add(self.seq_offset);
        self.last_ts = ts.wrapping_add(self.ts_offset);
        (self.last_seq, self.last_ts)
    }
}

#[derive(Clone, Copy, Default)]
struct Truth {
    received_ns: u64,
    sent_ns: u64,
    leg: u32,
    in_ssrc: u32,
    in_seq: u16,
    out_ssrc: u32,
    out_seq: u16,
}

struct Relay {
    sock: UdpSocket,
    args: Args,
    slots: Vec<Slot>,
    head: usize,
    tail: usize,
    /// Per leg, per source class (0: the layers; 1..: other SSRCs by first appearance).
    numbering: Vec<[Numbering; MAX_SOURCES]>,
    others: [u32; MAX_SOURCES],
    truth: Vec<Truth>,
    out: [u8; MAX_PACKET + 8],
    start_ns: u64,
}

impl Relay {
    fn class_of(&mut self, ssrc: u32) -> Option<usize> {
        if self.args.layers.contains(&ssrc) {
            return Some(0);
        }
        for (i, known) in self.others.iter_mut().enumerate().skip(1) {
            if *known == ssrc {
                return Some(i);
            }
            if *known == 0 {
                *known = ssrc;
                return Some(i);
            }
        }
        None
    }

    /// The layer leg `leg` takes now: legs switch in turn, `switch_ns` apart.
    fn layer_for(&self, leg: usize, now_ns: u64) -> Option<u32> {
        let n = self.args.layers.len() as u64;
        if n == 0 {
            return None;
        }
        let step = (now_ns - self.start_ns) / self.args.switch_ns + leg as u64;
        Some(self.args.layers[(step % n) as usize])
    }

    fn release(&mut self, index: usize) {
        let slot = self.slots[index];
        let packet = &slot.data[..slot.len];
        if packet.len() < 12 || packet[0] >> 6 != 2 || packet[0] & 0x10 != 0 {
            return; // not RTP, or already extended: not forwarded (counted by the capture)
        }
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let seq = u16::from_be_bytes([packet[2], packet[3]]);
        let ts = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        let Some(class) = self.class_of(ssrc) else {
            return;
        };
        let header = 12 + 4 * usize::from(packet[0] & 0x0f);
        if header > packet.len() {
            return;
        }
        for leg in 0..self.args.to.len() {
            if class == 0 && self.layer_for(leg, slot.received_ns) != Some(ssrc) {
                continue;
            }
            let leg_id = leg as u32 + 1;
            let out_ssrc = 0x5f00_0000 | leg_id << 8 | class as u32;
            let (out_seq, out_ts) = self.numbering[leg][class].map(
                ssrc,
                seq,
                ts,
                (1000 * leg_id) as u16,
                90_000 * leg_id,
            );
            let n = self.build(packet, header, out_ssrc, out_seq, out_ts, leg_id);
            let sent = self.sock.send_to(&self.out[..n], self.args.to[leg]).is_ok();
            if sent && self.truth.len() < MAX_TRUTH {
                self.truth.push(Truth {
                    received_ns: slot.received_ns,
                    sent_ns: monotonic_ns(),
                    leg: leg_id,
                    in_ssrc: ssrc,
                    in_seq: seq,
                    out_ssrc,
                    out_seq,
                });
            }
        }
    }

    /// The leg's copy in `self.out`: new SSRC, numbering, a one-word header extension
    /// (RFC 8285 one-byte form, id 1, two bytes) and the payload XORed with the leg id.
    fn build(
        &mut self,
        packet: &[u8],
        header: usize,
        ssrc: u32,
        seq: u16,
        ts: u32,
        leg: u32,
    ) -> usize {
        let out = &mut self.out;
        out[..header].copy_from_slice(&packet[..header]);
        out[0] |= 0x10;
        out[2..4].copy_from_slice(&seq.to_be_bytes());
        out[4..8].copy_from_slice(&ts.to_be_bytes());
        out[8..12].copy_from_slice(&ssrc.to_be_bytes());
        out[header..header + 8].copy_from_slice(&[0xbe, 0xde, 0, 1, 0x11, leg as u8, 0x5a, 0]);
        let payload = &packet[header..];
        let body = &mut out[header + 8..header + 8 + payload.len()];
        for (o, p) in body.iter_mut().zip(payload) {
            *o = p ^ (0xa5 ^ leg as u8);
        }
        header + 8 + payload.len()
    }
}

/// Wait until the socket is readable or `timeout_ns` passed (ppoll: an hrtimer, not the
/// jiffy-granular SO_RCVTIMEO); whether it is readable.
fn readable_within(sock: &UdpSocket, timeout_ns: u64) -> bool {
    use std::os::fd::AsRawFd;
    let mut fds = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timespec(timeout_ns);
    // SAFETY: one valid pollfd and a valid timespec.
    unsafe { libc::ppoll(&mut fds, 1, &ts, std::ptr::null()) > 0 }
}

fn run_loop(relay: &mut Relay, stop: &AtomicBool) {
    let mut buf = [0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        // Release what is due; wait for the next packet at most until the next release.
        while relay.tail != relay.head {
            let due = relay.slots[relay.tail].received_ns + relay.args.hold_ns;
            if due > monotonic_ns() + 200_000 {
                break;
            }
            rt::sleep_until(due);
            let index = relay.tail;
            relay.release(index);
            relay.tail = (relay.tail + 1) % SLOTS;
        }
        let wait_ns = if relay.tail != relay.head {
            (relay.slots[relay.tail].received_ns + relay.args.hold_ns)
                .saturating_sub(monotonic_ns() + 150_000)
        } else {
            100_000_000
        };
        if !readable_within(&relay.sock, wait_ns) {
            continue;
        }
        let Ok(n) = relay.sock.recv(&mut buf) else {
            continue;
        };
        let now = monotonic_ns();
        let next = (relay.head + 1) % SLOTS;
        if next == relay.tail || n > MAX_PACKET {
            continue; // ring full or oversized: dropped, the capture counts it
        }
        let slot = &mut relay.slots[relay.head];
        slot.received_ns = now;
        slot.len = n;
        slot.data[..n].copy_from_slice(&buf[..n]);
        relay.head = next;
    }
}

fn write_truth(truth: &[Truth]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(
        out,
        "received_ns,sent_ns,leg,in_ssrc,in_seq,out_ssrc,out_seq"
    )?;
    for t in truth {
        writeln!(
            out,
            "{},{},{},{},{},{},{}",
            t.received_ns, t.sent_ns, t.leg, t.in_ssrc, t.in_seq, t.out_ssrc, t.out_seq
        )?;
    }
    out.flush()
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let sock = UdpSocket::bind(("0.0.0.0", args.listen))
        .map_err(|e| format!("cannot bind UDP port {}: {e}", args.listen))?;
    install_stop_handler();
    let legs = args.to.len();
    let mut relay = Relay {
        sock,
        slots: vec![
            Slot {
                received_ns: 0,
                len: 0,
                data: [0; MAX_PACKET]
            };
            SLOTS
        ],
        head: 0,
        tail: 0,
        numbering: vec![[Numbering::default(); MAX_SOURCES]; legs],
        others: [0; MAX_SOURCES],
        truth: Vec::with_capacity(MAX_TRUTH),
        out: [0; MAX_PACKET + 8],
        start_ns: monotonic_ns(),
        args,
    };
    println!("ready");
    let _ = std::io::stdout().flush();
    run_loop(&mut relay, &STOP);
    write_truth(&relay.truth).map_err(|e| format!("cannot print the truth: {e}"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_stop_handler() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_stop as *const () as libc::sighandler_t) };
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latlab-relay: {e}");
            ExitCode::from(2)
        }
    }
}

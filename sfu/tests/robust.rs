//! latlab-sfu as a server: what reaches its packet entry points may be anything, peers
//! come and go, and it keeps forwarding for everyone else without panicking or growing.
//!
//! * `str0m_entry_survives_any_datagram`: proptest on the entry every datagram takes
//!   (`Receive::new`, `Rtc::handle_input`, the drain), for a peer configured as the SFU
//!   configures its peers, before and after its offer was accepted, with datagrams
//!   shaped as STUN, DTLS, RTP and RTCP (first-byte ranges, magic cookie) and raw;
//! * `keeps_forwarding_through_garbage_and_churn`: the program, a publisher and two
//!   subscribers, while malformed datagrams arrive from the publisher's own address and
//!   from unknown ones and subscribers join and leave (a third of them without a word);
//! * `join_leave_cycles_free_everything`: 300 WHEP joins and DELETEs; afterwards no peer
//!   is left and the resident memory grew by less than 8 MiB.
//!
//! Time budget: about 10 s in all (release build).

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use latlab_sfu::load::{self, http, LoadConfig};
use proptest::prelude::*;
use str0m::change::SdpOffer;
use str0m::media::{Direction, MediaKind, Simulcast, SimulcastLayer};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Input, Output, Rtc, RtcConfig};

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A pair of free-looking ports (HTTP, UDP) for one SFU of this test process.
fn ports() -> (u16, u16) {
    let base = 30000 + (std::process::id() % 1000) as u16 * 20;
    let n = NEXT_PORT.fetch_add(2, Ordering::SeqCst);
    (base + n, base + n + 1)
}

struct Sfu {
    child: Child,
    http: SocketAddrV4,
    udp: SocketAddrV4,
    stderr: std::thread::JoinHandle<String>,
}

impl Sfu {
    fn start() -> Sfu {
        let (http_port, udp_port) = ports();
        let mut child = Command::new(env!("CARGO_BIN_EXE_latlab-sfu"))
            .args(["--bind", "127.0.0.1", "--http-port", &http_port.to_string()])
            .args(["--udp-port", &udp_port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("latlab-sfu starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("ready"), "no ready line: {line:?}");
        let err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                all.push_str(&l);
                all.push('\n');
            }
            all
        });
        Sfu {
            child,
            http: SocketAddrV4::new(Ipv4Addr::LOCALHOST, http_port),
            udp: SocketAddrV4::new(Ipv4Addr::LOCALHOST, udp_port),
            stderr,
        }
    }

    fn stats(&self) -> String {
        let (status, _, body) = http(self.http, "GET", "/stats", "").unwrap();
        assert_eq!(status, 200);
        body
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// Stops it (SIGINT) and returns what it said on stderr.
    fn stop(mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "latlab-sfu exited with {status}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "latlab-sfu did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stderr.join().unwrap()
    }
}

fn number(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {json}"));
    json[at + key.len() + 3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// An offer as a browser's WHIP client sends it: Opus and three VP8 layers.
fn publisher_offer() -> String {
    let mut client = RtcConfig::new().set_rtp_mode(true).build(Instant::now());
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
    client.add_local_candidate(Candidate::host(local, "udp").unwrap());
    let mut api = client.sdp_api();
    api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
    let mut sim = Simulcast::new();
    for rid in ["q", "h", "f"] {
        sim.add_send_layer(SimulcastLayer::new(rid));
    }
    api.add_media(MediaKind::Video, Direction::SendOnly, None, None, Some(sim));
    let (offer, _) = api.apply().unwrap();
    offer.to_sdp_string()
}

/// A peer configured as latlab-sfu configures a publisher, its offer accepted.
fn sfu_peer(offer: &str) -> Rtc {
    let mut rtc = RtcConfig::new()
        .set_rtp_mode(true)
        .set_ice_lite(true)
        .clear_codecs()
        .enable_opus(true, false)
        .enable_vp8(true)
        .build(Instant::now());
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 20000));
    rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
    let offer = SdpOffer::from_sdp_string(offer).unwrap();
    rtc.sdp_api().accept_offer(offer).unwrap();
    rtc
}

fn feed(rtc: &mut Rtc, data: &[u8], now: Instant) {
    let source = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 20000));
    if let Ok(r) = Receive::new(Protocol::Udp, source, local, data) {
        let _ = rtc.handle_input(Input::Receive(now, r));
    }
    for _ in 0..1000 {
        match rtc.poll_output() {
            Ok(Output::Timeout(_)) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Shapes a datagram as `kind` would start: 0 STUN, 1 DTLS, 2 RTP, 3 RTCP, else raw.
fn shaped(kind: u8, mut data: Vec<u8>) -> Vec<u8> {
    if data.is_empty() {
        return data;
    }
    match kind {
        0 => {
            data[0] &= 0x01;
            if data.len() >= 8 {
                data[4..8].copy_from_slice(&[0x21, 0x12, 0xa4, 0x42]);
            }
        }
        1 => data[0] = 20 + data[0] % 44,
        2 => {
            data[0] = 0x80 | (data[0] & 0x3f);
            if data.len() > 1 {
                data[1] = 96 + data[1] % 16;
            }
        }
        3 => {
            data[0] = 0x80 | (data[0] & 0x1f);
            if data.len() > 1 {
                data[1] = 200 + data[1] % 7;
            }
        }
        _ => {}
    }
    data
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn str0m_entry_survives_any_datagram(
        datagrams in proptest::collection::vec(
            (0u8..5, proptest::collection::vec(any::<u8>(), 0..1300)), 1..8)
    ) {
        let offer = publisher_offer();
        let mut rtc = sfu_peer(&offer);
        let start = Instant::now();
        for (i, (kind, data)) in datagrams.into_iter().enumerate() {
            feed(&mut rtc, &shaped(kind, data), start + Duration::from_millis(i as u64 * 7));
        }
        let _ = rtc.handle_input(Input::Timeout(start + Duration::from_secs(2)));
    }

    #[test]
    fn our_parsers_survive_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let _ = latlab_sfu::forward::vp8_info(&bytes);
        let _ = lltrace::RtpHeader::parse(&bytes);
        let _ = latlab_sfu::http::read_request(&mut std::io::BufReader::new(&bytes[..]));
    }
}

#[test]
fn keeps_forwarding_through_garbage_and_churn() {
    let sfu = Sfu::start();
    let cfg = LoadConfig {
        sfu: sfu.http,
        media: sfu.udp,
        subscribers: 2,
        seconds: 4.0,
        garbage_pps: 500,
        churn: 9,
        name: "robust".into(),
        ..LoadConfig::default()
    };
    let summary = load::run(&cfg, &|| false, &mut || {}).expect("the load runs");
    let stats = sfu.stats();
    let err = sfu.stop();
    assert!(!err.contains("panic"), "latlab-sfu panicked:\n{err}");
    // 4 s of 50 audio packets a second to each of 2 subscribers: they all arrived
    // (loopback loses nothing), and video too.
    assert!(summary.received_audio >= 380, "{}", summary.json());
    assert!(summary.received_video >= 200, "{}", summary.json());
    assert!(summary.garbage_sent >= 3000, "{}", summary.json());
    assert!(
        number(&stats, "unknown_source") + number(&stats, "malformed") > 0,
        "{stats}"
    );
    assert_eq!(number(&stats, "panics"), 0, "{stats}");
    assert!(summary.churned >= 8, "{}", summary.json());
}

#[test]
fn join_leave_cycles_free_everything() {
    let sfu = Sfu::start();
    let mut client = RtcConfig::new().set_rtp_mode(true).build(Instant::now());
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.add_local_candidate(Candidate::host(sock.local_addr().unwrap(), "udp").unwrap());
    let mut api = client.sdp_api();
    api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    let (offer, _) = api.apply().unwrap();
    let offer = offer.to_sdp_string();
    let publisher = publisher_offer();
    let cycle = |i: usize| {
        let (kind, sdp) = if i.is_multiple_of(10) {
            ("whip", &publisher)
        } else {
            ("whep", &offer)
        };
        let (status, location, body) =
            http(sfu.http, "POST", &format!("/{kind}/r{}", i % 3), sdp).unwrap();
        assert_eq!(status, 201, "{body}");
        let (status, _, _) = http(sfu.http, "DELETE", &location.unwrap(), "").unwrap();
        assert_eq!(status, 200);
    };
    for i in 0..20 {
        cycle(i);
    }
    let rss_before = sfu.rss_kib();
    for i in 0..300 {
        cycle(i);
    }
    let stats = sfu.stats();
    let rss_after = sfu.rss_kib();
    let err = sfu.stop();
    assert_eq!(number(&stats, "peers"), 0, "{stats}");
    assert_eq!(number(&stats, "joined"), 320, "{stats}");
    assert_eq!(number(&stats, "left"), 320, "{stats}");
    assert!(
        rss_after < rss_before + 8 * 1024,
        "resident memory grew from {rss_before} to {rss_after} KiB over 300 cycles"
    );
    assert!(!err.contains("panic"), "{err}");
}

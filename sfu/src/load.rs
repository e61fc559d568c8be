//! Light WebRTC participants for load, benchmarks and robustness tests
//! (`latlab-sfu-load`): real ICE, DTLS, SRTP and RTCP feedback through str0m, no codec
//! work. Publishers join with WHIP and send Opus-sized audio every 20 ms and VP8 in
//! three simulcast layers (payload descriptors and key frame headers as Chromium's, the
//! rest filler), answering key frame requests; subscribers join with WHEP and count
//! what arrives. Every payload carries its send time (CLOCK_MONOTONIC ns), so a
//! subscriber on the same machine measures each packet's one-way delay through the
//! SFU. All participants run on one thread, each on its own UDP socket.
//!
//! For robustness runs it can also send malformed datagrams (STUN, DTLS, RTP and RTCP
//! shaped) from its publishers' sockets and from unknown ones, and make subscribers join
//! and leave over and over (some leave without saying so).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use lltrace::clock::monotonic_ns;
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid, Pt, Rid, Simulcast, SimulcastLayer};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{RtpWrite, SeqNo};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The SFU's HTTP address.
    pub sfu: SocketAddrV4,
    /// The SFU's media (UDP) address, where malformed datagrams go.
    pub media: SocketAddrV4,
    /// The address the participants' sockets bind.
    pub bind: Ipv4Addr,
    pub room: String,
    pub publishers: usize,
    pub subscribers: usize,
    /// How long to run once everyone is connected.
    pub seconds: f64,
    /// Simulcast layers' bitrates, lowest first (kbps); one entry: no simulcast.
    pub layers_kbps: Vec<u32>,
    pub fps: u32,
    /// Malformed datagrams a second (0: none).
    pub garbage_pps: u32,
    /// Join/leave cycles of extra subscribers during the run.
    pub churn: usize,
    pub name: String,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            sfu: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8089),
            media: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 20000),
            bind: Ipv4Addr::LOCALHOST,
            room: "load".into(),
            publishers: 1,
            subscribers: 2,
            seconds: 10.0,
            layers_kbps: vec![150, 500, 1500],
            fps: 30,
            garbage_pps: 0,
            churn: 0,
            name: "load".into(),
        }
    }
}

const WIDTHS: [u16; 4] = [320, 640, 1280, 1920];
const MAX_PAYLOAD: usize = 1100;
const HIST_BUCKET_US: u64 = 10;
const HIST_BUCKETS: usize = 20_000; // 200 ms

/// One-way delays (µs) in 10 µs buckets: no allocation per packet.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    pub n: u64,
    pub over: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; HIST_BUCKETS],
            n: 0,
            over: 0,
        }
    }
}

impl Histogram {
    pub fn add(&mut self, us: u64) {
        self.n += 1;
        match self.counts.get_mut((us / HIST_BUCKET_US) as usize) {
            Some(c) => *c += 1,
            None => self.over += 1,
        }
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.over += other.over;
    }

    /// The `q` quantile (0-1) in µs (the bucket's upper edge); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let want = ((self.n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some((i as u64 + 1) * HIST_BUCKET_US);
            }
        }
        Some(HIST_BUCKETS as u64 * HIST_BUCKET_US)
    }
}

/// A blocking HTTP/1.1 request; the status, Location header and body.
pub fn http(
    addr: SocketAddrV4,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, Option<String>, String), String> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::V4(addr), Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no HTTP answer"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: bad status line"))?;
    let location = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("location")
            .then(|| v.trim().to_string())
    });
    Ok((status, location, body.to_string()))
}

#[derive(Clone, Copy, Default)]
struct VideoStream {
    seq: u64,
    pic: u16,
    tl0: u8,
    key_due: bool,
}

struct PubState {
    audio: Option<(Mid, Pt)>,
    video: Option<(Mid, Pt)>,
    rids: Vec<Rid>,
    streams: Vec<VideoStream>,
    audio_seq: u64,
    frame: u64,
    next_audio: Instant,
    next_video: Instant,
    start: Instant,
}

/// What a subscriber received.
#[derive(Default, Clone)]
pub struct SubStats {
    pub audio_packets: u64,
    pub video_packets: u64,
    pub bytes: u64,
    pub delay: Histogram,
}

enum Role {
    Pub(Box<PubState>),
    Sub(Box<SubStats>),
}

struct Client {
    name: String,
    rtc: Rtc,
    sock: UdpSocket,
    local: SocketAddr,
    role: Role,
    resource: Option<String>,
    connected: bool,
    deadline: Instant,
    dead: bool,
    /// Churn participants that leave without a DELETE (vanish).
    silent: bool,
}

/// The run's outcome.
#[derive(Default)]
pub struct Summary {
    pub sent_packets: u64,
    pub received_audio: u64,
    pub received_video: u64,
    pub delay: Histogram,
    pub garbage_sent: u64,
    pub churned: usize,
    pub seconds: f64,
    pub connect_s: f64,
}

impl Summary {
    pub fn json(&self) -> String {
        let q = |x: f64| {
            self.delay
                .quantile(x)
                .map_or("null".into(), |v| v.to_string())
        };
        format!(
            "{{\"seconds\":{:.3},\"connect_s\":{:.3},\"sent_packets\":{},\"received_audio\":{},\
             \"received_video\":{},\"delay_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"n\":{},\"over_200ms\":{}}},\
             \"garbage_sent\":{},\"churned\":{}}}",
            self.seconds,
            self.connect_s,
            self.sent_packets,
            self.received_audio,
            self.received_video,
            q(0.5),
            q(0.9),
            q(0.99),
            self.delay.n,
            self.delay.over,
            self.garbage_sent,
            self.churned
        )
    }
}

fn pt_for(rtc: &Rtc, mid: Mid, codec: Codec) -> Option<Pt> {
    let remote = rtc.media(mid)?.remote_pts().to_vec();
    rtc.codec_config()
        .params()
        .iter()
        .find(|p| p.spec().codec == codec && remote.contains(&p.pt()))
        .map(|p| p.pt())
}

fn new_rtc() -> Rtc {
    RtcConfig::new()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_opus(true, false)
        .enable_vp8(true)
        .build(Instant::now())
}

fn bind_socket(addr: Ipv4Addr) -> Result<(UdpSocket, SocketAddr), String> {
    let sock = UdpSocket::bind((addr, 0)).map_err(|e| format!("bind udp {addr}: {e}"))?;
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    Ok((sock, local))
}

fn negotiate(
    cfg: &LoadConfig,
    rtc: &mut Rtc,
    kind: &str,
    name: &str,
    offer: str0m::change::SdpOffer,
    pending: SdpPendingOffer,
) -> Result<String, String> {
    let path = format!("/{kind}/{}?name={name}", cfg.room);
    let (status, location, body) = http(cfg.sfu, "POST", &path, &offer.to_sdp_string())?;
    if status != 201 {
        return Err(format!("{name}: {kind} answered {status}: {}", body.trim()));
    }
    let answer = SdpAnswer::from_sdp_string(&body).map_err(|e| format!("{name}: answer: {e}"))?;
    rtc.sdp_api()
        .accept_answer(pending, answer)
        .map_err(|e| format!("{name}: accept answer: {e}"))?;
    location.ok_or_else(|| format!("{name}: no Location"))
}

fn publisher(cfg: &LoadConfig, name: &str) -> Result<Client, String> {
    let mut rtc = new_rtc();
    let (sock, local) = bind_socket(cfg.bind)?;
    rtc.add_local_candidate(Candidate::host(local, "udp").map_err(|e| e.to_string())?);
    let mut api = rtc.sdp_api();
    let audio = api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
    let rids: Vec<Rid> = if cfg.layers_kbps.len() > 1 {
        ["q", "h", "f", "x"][..cfg.layers_kbps.len().min(4)]
            .iter()
            .map(|r| Rid::from(*r))
            .collect()
    } else {
        Vec::new()
    };
    let simulcast = (!rids.is_empty()).then(|| {
        let mut s = Simulcast::new();
        for r in &rids {
            s.add_send_layer(SimulcastLayer::new(r));
        }
        s
    });
    let video = api.add_media(MediaKind::Video, Direction::SendOnly, None, None, simulcast);
    let (offer, pending) = api.apply().ok_or("no offer")?;
    let resource = negotiate(cfg, &mut rtc, "whip", name, offer, pending)?;
    let audio_pt = pt_for(&rtc, audio, Codec::Opus);
    let video_pt = pt_for(&rtc, video, Codec::Vp8);
    let now = Instant::now();
    let n = rids.len().max(1);
    Ok(Client {
        name: name.into(),
        rtc,
        sock,
        local,
        role: Role::Pub(Box::new(PubState {
            audio: audio_pt.map(|p| (audio, p)),
            video: video_pt.map(|p| (video, p)),
            rids,
            streams: (0..n)
                .map(|i| VideoStream {
                    seq: 1000 + i as u64 * 7000,
                    pic: (i as u16) * 1000,
                    tl0: 0,
                    key_due: true,
                })
                .collect(),
            audio_seq: 5000,
            frame: 0,
            next_audio: now,
            next_video: now,
            start: now,
        })),
        resource: Some(resource),
        connected: false,
        deadline: now,
        dead: false,
        silent: false,
    })
}

fn subscriber(cfg: &LoadConfig, name: &str, slots: usize) -> Result<Client, String> {
    let mut rtc = new_rtc();
    let (sock, local) = bind_socket(cfg.bind)?;
    rtc.add_local_candidate(Candidate::host(local, "udp").map_err(|e| e.to_string())?);
    let mut api = rtc.sdp_api();
    for _ in 0..slots.max(1) {
        api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    }
    let (offer, pending) = api.apply().ok_or("no offer")?;
    let resource = negotiate(cfg, &mut rtc, "whep", name, offer, pending)?;
    Ok(Client {
        name: name.into(),
        rtc,
        sock,
        local,
        role: Role::Sub(Box::default()),
        resource: Some(resource),
        connected: false,
        deadline: Instant::now(),
        dead: false,
        silent: false,
    })
}

/// A VP8 packet: descriptor (X, I with a 15-bit PictureID, L, T), for a key frame's
/// first packet the payload header with its size, then the send time and filler.
fn vp8_packet(out: &mut Vec<u8>, s: &VideoStream, first: bool, key: bool, width: u16, len: usize) {
    out.clear();
    out.push(0x80 | if first { 0x10 } else { 0 });
    out.push(0xe0);
    out.push(0x80 | ((s.pic >> 8) as u8 & 0x7f));
    out.push(s.pic as u8);
    out.push(s.tl0);
    out.push(0x20);
    if first {
        let height = width / 16 * 9;
        let tag = if key { 0x10 } else { 0x11 };
        out.extend_from_slice(&[tag, 0x02, 0x00, 0x9d, 0x01, 0x2a]);
        out.extend_from_slice(&width.to_le_bytes());
        out.extend_from_slice(&height.to_le_bytes());
    }
    out.extend_from_slice(&monotonic_ns().to_le_bytes());
    while out.len() < len {
        out.push((out.len() as u8).wrapping_mul(31));
    }
}

/// The send time a payload carries (see [`vp8_packet`]; audio: its first 8 bytes).
fn sent_ns(video: bool, payload: &[u8]) -> Option<u64> {
    let at = if video {
        if payload.len() < 6 {
            return None;
        }
        if payload[0] & 0x10 != 0 {
            16
        } else {
            6
        }
    } else {
        0
    };
    Some(u64::from_le_bytes(
        payload.get(at..at + 8)?.try_into().ok()?,
    ))
}

/// A packet to write: mid, rid, PT, sequence number, timestamp, marker, payload.
type PendingWrite = (Mid, Option<Rid>, Pt, u64, u32, bool, Vec<u8>);

impl Client {
    fn handle(&mut self, input: Input) {
        if self.rtc.handle_input(input).is_err() {
            self.dead = true;
        }
        self.drain();
    }

    fn drain(&mut self) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => {
                    self.deadline = t;
                    return;
                }
                Ok(Output::Transmit(t)) => {
                    let _ = self.sock.send_to(&t.contents, t.destination);
                }
                Ok(Output::Event(e)) => self.on_event(e),
                Err(_) => {
                    self.dead = true;
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Connected => self.connected = true,
            Event::RtpPacket(p) => {
                if let Role::Sub(s) = &mut self.role {
                    let mid = self
                        .rtc
                        .direct_api()
                        .stream_rx(&p.header.ssrc)
                        .map(|s| s.mid());
                    let video = mid
                        .and_then(|m| self.rtc.media(m))
                        .is_some_and(|m| m.kind() == MediaKind::Video);
                    if video {
                        s.video_packets += 1;
                    } else {
                        s.audio_packets += 1;
                    }
                    s.bytes += p.payload.len() as u64;
                    if let Some(t) = sent_ns(video, &p.payload) {
                        let now = monotonic_ns();
                        if t <= now && now - t < 60_000_000_000 {
                            s.delay.add((now - t) / 1000);
                        }
                    }
                }
            }
            Event::KeyframeRequest(req) => {
                if let Role::Pub(p) = &mut self.role {
                    let i = req
                        .rid
                        .and_then(|r| p.rids.iter().position(|x| *x == r))
                        .unwrap_or(0);
                    if let Some(s) = p.streams.get_mut(i) {
                        s.key_due = true;
                    }
                }
            }
            Event::IceConnectionStateChange(str0m::IceConnectionState::Disconnected)
            | Event::Closed => self.dead = true,
            _ => {}
        }
    }

    /// Sends what is due of the publisher's media; the packets sent.
    fn send_media(&mut self, cfg: &LoadConfig, buf: &mut Vec<u8>) -> u64 {
        let Role::Pub(p) = &mut self.role else {
            return 0;
        };
        if !self.connected {
            return 0;
        }
        let now = Instant::now();
        let mut writes: Vec<PendingWrite> = Vec::new();
        if let Some((mid, pt)) = p.audio {
            while p.next_audio <= now {
                let ts = (p.next_audio - p.start).as_micros() as u64 * 48 / 1000;
                buf.clear();
                buf.extend_from_slice(&monotonic_ns().to_le_bytes());
                let len = 60 + (p.audio_seq * 37 % 100) as usize;
                while buf.len() < len {
                    buf.push(buf.len() as u8);
                }
                writes.push((mid, None, pt, p.audio_seq, ts as u32, false, buf.clone()));
                p.audio_seq += 1;
                p.next_audio += Duration::from_millis(20);
            }
        }
        if let Some((mid, pt)) = p.video {
            let interval = Duration::from_secs(1) / cfg.fps.max(1);
            while p.next_video <= now {
                let ts = ((p.next_video - p.start).as_micros() as u64 * 90 / 1000) as u32;
                for (i, kbps) in cfg.layers_kbps.iter().enumerate() {
                    let s = &mut p.streams[i];
                    // A key frame every 4 s or when asked.
                    let key = s.key_due || p.frame % (cfg.fps as u64 * 4) == 0;
                    s.key_due = false;
                    let mut size = (*kbps as usize * 1000 / 8 / cfg.fps.max(1) as usize).max(200);
                    if key {
                        size *= 4;
                    }
                    let npackets = size.div_ceil(MAX_PAYLOAD);
                    let rid = p.rids.get(i).copied();
                    for k in 0..npackets {
                        let len = (size / npackets).max(30);
                        vp8_packet(buf, s, k == 0, key, WIDTHS[i.min(3)], len);
                        writes.push((mid, rid, pt, s.seq, ts, k + 1 == npackets, buf.clone()));
                        s.seq += 1;
                    }
                    s.pic = (s.pic + 1) & 0x7fff;
                    s.tl0 = s.tl0.wrapping_add(1);
                }
                p.frame += 1;
                p.next_video += interval;
            }
        }
        let n = writes.len() as u64;
        for (mid, rid, pt, seq, ts, marker, payload) in writes {
            let mut api = self.rtc.direct_api();
            let Some(tx) = api.stream_tx_by_mid(mid, rid) else {
                continue;
            };
            tx.write_rtp(
                RtpWrite::new(pt, SeqNo::from(seq), ts, now, payload)
                    .marker(marker)
                    .nackable(rid.is_some() || marker),
            );
            self.drain();
            if self.deadline <= Instant::now() {
                self.handle(Input::Timeout(Instant::now()));
            }
        }
        n
    }

    fn next_media(&self) -> Option<Instant> {
        match &self.role {
            Role::Pub(p) if self.connected => Some(p.next_audio.min(p.next_video)),
            _ => None,
        }
    }
}

/// A malformed datagram of kind `i % 5`: STUN-shaped, DTLS-shaped, RTP-shaped,
/// RTCP-shaped, or random bytes.
pub fn garbage(i: u64, out: &mut Vec<u8>) {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    out.clear();
    let len = 1 + (next() as usize * 5) % 1200;
    for _ in 0..len {
        out.push(next());
    }
    match i % 5 {
        0 => {
            out[0] &= 0x01; // STUN: first byte 0-1
            if out.len() >= 8 {
                out[4..8].copy_from_slice(&[0x21, 0x12, 0xa4, 0x42]);
            }
        }
        1 => out[0] = 20 + out[0] % 44, // DTLS: 20-63
        2 => {
            out[0] = 0x80 | (out[0] & 0x3f); // RTP
            if out.len() > 1 {
                out[1] &= 0x7f;
            }
        }
        3 => {
            out[0] = 0x80 | (out[0] & 0x1f); // RTCP: PT 200-206
            if out.len() > 1 {
                out[1] = 200 + out[1] % 7;
            }
        }
        _ => {}
    }
}

fn wait_fds(clients: &[Client], extra: &[i32], deadline: Option<Instant>) {
    let mut fds: Vec<libc::pollfd> = clients
        .iter()
        .map(|c| c.sock.as_raw_fd())
        .chain(extra.iter().copied())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = deadline.map(|d| {
        lltrace::clock::timespec(d.saturating_duration_since(Instant::now()).as_nanos() as u64)
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds and the timespec are valid for the call.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
}

fn service(clients: &mut [Client], buf: &mut [u8]) {
    for c in clients.iter_mut() {
        if c.dead {
            continue;
        }
        while let Ok((n, source)) = c.sock.recv_from(buf) {
            if c.silent {
                continue;
            }
            let Ok(r) = Receive::new(Protocol::Udp, source, c.local, &buf[..n]) else {
                continue;
            };
            c.handle(Input::Receive(Instant::now(), r));
        }
        if !c.silent && c.deadline <= Instant::now() {
            c.handle(Input::Timeout(Instant::now()));
        }
    }
}

/// Runs the load; `ready` is called once every participant is connected (and every
/// subscriber has received video when there are publishers).
pub fn run(
    cfg: &LoadConfig,
    stop: &dyn Fn() -> bool,
    ready: &mut dyn FnMut(),
) -> Result<Summary, String> {
    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..cfg.publishers {
        clients.push(publisher(cfg, &format!("{}-pub{i}", cfg.name))?);
    }
    for i in 0..cfg.subscribers {
        clients.push(subscriber(
            cfg,
            &format!("{}-sub{i}", cfg.name),
            cfg.publishers.max(1),
        )?);
    }
    let mut buf = vec![0u8; 2048];
    let mut media = Vec::with_capacity(2048);
    let mut summary = Summary::default();
    // Until everyone is connected and media flows.
    let connect_deadline = started + Duration::from_secs(30);
    loop {
        let flowing = clients.iter().all(|c| match &c.role {
            Role::Pub(_) => c.connected,
            Role::Sub(s) => c.connected && (cfg.publishers == 0 || s.video_packets > 0),
        });
        if flowing {
            break;
        }
        if Instant::now() > connect_deadline || stop() {
            let missing: Vec<&str> = clients
                .iter()
                .filter(|c| !c.connected)
                .map(|c| c.name.as_str())
                .collect();
            return Err(format!(
                "media did not flow in 30 s (not connected: {missing:?})"
            ));
        }
        for c in clients.iter_mut() {
            summary.sent_packets += c.send_media(cfg, &mut media);
        }
        let next = clients
            .iter()
            .flat_map(|c| [Some(c.deadline), c.next_media()])
            .flatten()
            .min()
            .map(|d| d.min(Instant::now() + Duration::from_millis(50)));
        wait_fds(&clients, &[], next);
        service(&mut clients, &mut buf);
    }
    summary.connect_s = started.elapsed().as_secs_f64();
    for c in clients.iter_mut() {
        if let Role::Sub(s) = &mut c.role {
            **s = SubStats::default();
        }
    }
    ready();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(cfg.seconds);
    let (garbage_sock, _) = bind_socket(cfg.bind)?;
    let garbage_every = (cfg.garbage_pps > 0).then(|| Duration::from_secs(1) / cfg.garbage_pps);
    let mut next_garbage = t0;
    let mut garbage_i = 0u64;
    let churn_every =
        (cfg.churn > 0).then(|| Duration::from_secs_f64(cfg.seconds / (cfg.churn as f64 + 1.0)));
    let mut next_churn = t0 + churn_every.unwrap_or_default();
    let mut churn: Vec<Client> = Vec::new();
    while Instant::now() < end && !stop() {
        for c in clients.iter_mut() {
            summary.sent_packets += c.send_media(cfg, &mut media);
        }
        let now = Instant::now();
        if let Some(every) = garbage_every {
            let target = SocketAddr::V4(cfg.media);
            while next_garbage <= now {
                garbage(garbage_i, &mut media);
                // From a publisher's own socket (a known peer) and from an unknown one.
                if let Some(p) = clients.first() {
                    let _ = p.sock.send_to(&media, target);
                }
                let _ = garbage_sock.send_to(&media, target);
                summary.garbage_sent += 2;
                garbage_i += 1;
                next_garbage += every;
            }
        }
        if let Some(every) = churn_every {
            if now >= next_churn && summary.churned < cfg.churn {
                next_churn += every;
                let name = format!("{}-churn{}", cfg.name, summary.churned);
                if let Ok(mut c) = subscriber(cfg, &name, 1) {
                    // Every third vanishes without a word; the others leave politely
                    // once connected (or at the next churn).
                    c.silent = summary.churned % 3 == 2;
                    churn.push(c);
                }
                summary.churned += 1;
            }
            // Leave: the connected ones (polite) and the silent ones at once.
            churn.retain_mut(|c| {
                if c.silent || c.connected || c.dead {
                    if !c.silent {
                        if let Some(r) = &c.resource {
                            let _ = http(cfg.sfu, "DELETE", r, "");
                        }
                    }
                    false
                } else {
                    true
                }
            });
        }
        let next = clients
            .iter()
            .chain(churn.iter())
            .flat_map(|c| [Some(c.deadline), c.next_media()])
            .flatten()
            .chain(garbage_every.map(|_| next_garbage))
            .min()
            .map(|d| d.min(end));
        let mut all: Vec<i32> = churn.iter().map(|c| c.sock.as_raw_fd()).collect();
        all.push(garbage_sock.as_raw_fd());
        wait_fds(&clients, &all, next);
        service(&mut clients, &mut buf);
        service(&mut churn, &mut buf);
        while garbage_sock.recv_from(&mut buf).is_ok() {}
    }
    summary.seconds = t0.elapsed().as_secs_f64();
    for c in &clients {
        if let Role::Sub(s) = &c.role {
            summary.received_audio += s.audio_packets;
            summary.received_video += s.video_packets;
            summary.delay.merge(&s.delay);
        }
    }
    for c in clients.iter().chain(churn.iter()) {
        if let Some(r) = &c.resource {
            let _ = http(cfg.sfu, "DELETE", r, "");
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::default();
        for us in [5, 15, 25, 35, 1_000_000] {
            h.add(us);
        }
        assert_eq!(h.quantile(0.5), Some(30));
        assert_eq!(h.over, 1);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn payloads_carry_their_send_time() {
        let mut buf = Vec::new();
        let s = VideoStream::default();
        for first in [true, false] {
            vp8_packet(&mut buf, &s, first, true, 640, 100);
            let t = sent_ns(true, &buf).unwrap();
            assert!(monotonic_ns() - t < 1_000_000_000);
            let info = crate::forward::vp8_info(&buf).unwrap();
            assert_eq!(info.keyframe, first);
            if first {
                assert_eq!(info.width, 640);
            }
        }
    }

    #[test]
    fn garbage_has_each_shape() {
        let mut buf = Vec::new();
        for i in 0..50 {
            garbage(i, &mut buf);
            assert!(!buf.is_empty());
        }
    }
}

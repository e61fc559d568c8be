//! The SFU: one thread owns every peer's `Rtc` (str0m, RTP mode), the one UDP socket
//! and the rooms; one loop waits on the socket, the signalling waker and the earliest
//! deadline any peer asked for, and does everything in between by direct calls.
//!
//! Per received datagram: demultiplex by source address (a hash lookup; STUN from an
//! unknown address asks each peer's ICE agent), `handle_input`, drain `poll_output`.
//! A publisher's RTP packet is written to every subscriber leg that carries it
//! (`StreamTx::write_rtp` with the leg's sequence number, timestamp and VP8 picture ids:
//! the payload is shared, not copied); the legs are drained once the datagram is done,
//! their due timers run once per batch, and everything collected goes out in one
//! `sendmmsg`. A peer is only ever mutated after its previous mutation was drained
//! (str0m's contract).

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lltrace::clock::monotonic_ns;
use lltrace::{kind, FwdSource, Record, RtpHeader, NONE};
use str0m::bwe::{Bitrate, BweKind};
use str0m::change::SdpOffer;
use str0m::config::DtlsCert;
use str0m::format::Codec;
use str0m::media::{KeyframeRequestKind, MediaKind, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{ExtensionValues, RtpPacket, RtpWrite, SeqNo, Ssrc, Vp8Descriptor};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Reason, Rtc, RtcConfig};

use crate::args::{BweMode, Config};
use crate::forward::{choose_layer, vp8_info, LayerRate, PictureIds, Rewrite, Vp8Info};
use crate::http::{Reply, Request};
use crate::net::{self, NetCounts, RecvBatch, SendBatch, Socket, Waker};
use crate::probe::{self, Probes};

/// A peer that has not connected this long after its offer is dropped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Layer rates are measured over this window (checked when packets arrive: no timer).
const RATE_WINDOW_NS: u64 = 1_000_000_000;
/// A layer that sent nothing for this long is inactive.
const LAYER_IDLE_NS: u64 = 1_500_000_000;
/// At most one key frame request per layer this often.
const PLI_EVERY_NS: u64 = 300_000_000;
/// No upward layer switch sooner than this after a downward one.
const UP_AFTER_DOWN_NS: u64 = 3_000_000_000;
const MAX_LAYERS: usize = 4;
const MAX_SLOTS: usize = 16;
/// Sequence numbers remembered per leg for its probe records.
const PROBE_MAP: usize = 1024;
/// Timer rounds per loop iteration at most (a key frame's burst to a leg takes one round
/// per packet); what is left waits for the next iteration, which does not sleep.
const MAX_TIMER_ROUNDS: usize = 256;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM end the loop (ppoll returns EINTR: no SA_RESTART).
pub fn install_stop_handlers() {
    for signum in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signum, &action, std::ptr::null_mut());
        }
    }
}

/// What the loop counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub rtp_in: u64,
    pub forwarded: u64,
    pub not_forwarded: u64,
    pub layer_switches: u64,
    pub keyframe_requests_sent: u64,
    pub keyframe_requests_in: u64,
    pub unknown_source: u64,
    pub malformed: u64,
    pub rtc_errors: u64,
    pub panics: u64,
    pub joined: u64,
    pub left: u64,
    pub wakeups: u64,
    pub timer_inputs: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Layer {
    ssrc: u32,
    width: u16,
    bytes: u64,
    window_start_ns: u64,
    bps: u64,
    last_seen_ns: u64,
    last_pli_ns: u64,
}

#[derive(Default)]
struct Publisher {
    audio_mid: Option<Mid>,
    video_mid: Option<Mid>,
    /// Its offer sends video in more than one layer (simulcast).
    simulcast: bool,
    audio_ssrc: Option<u32>,
    layers: Vec<Layer>,
    /// SSRCs str0m did not map to a media (ignored; bounded).
    unknown: Vec<u32>,
}

/// One outgoing stream of a subscriber.
struct Leg {
    mid: Mid,
    pt: Option<Pt>,
    ssrc: u32,
    rewrite: Rewrite,
    /// Forget the offsets at the next packet (a new publisher in the slot).
    rebase: bool,
    /// `--trace`: out seq -> source, for the `fwd` records.
    probe_map: Vec<(u16, FwdSource)>,
}

struct VideoLeg {
    leg: Leg,
    current: Option<usize>,
    target: Option<usize>,
    pics: PictureIds,
    last_down_ns: u64,
}

#[derive(Default)]
struct Slot {
    publisher: Option<u64>,
    audio: Option<Leg>,
    video: Option<VideoLeg>,
}

struct Subscriber {
    slots: Vec<Slot>,
    /// It has a bandwidth estimator (and str0m's pacer); else `estimate_bps` stays
    /// `--bwe-initial-kbps`.
    bwe: bool,
    estimate_bps: u64,
    egress_pad: u32,
}

enum Role {
    Pub(Publisher),
    Sub(Subscriber),
}

struct Peer {
    id: u64,
    name: String,
    room: usize,
    rtc: Rtc,
    role: Role,
    deadline: Instant,
    /// The deadline may be serviced late by the timer slack (not a pacer's).
    slack: bool,
    created: Instant,
    connected: bool,
    dead: bool,
    /// Mutated since the last drain.
    dirty: bool,
    /// Inside its own drain loop (a mutation there is drained by that loop).
    in_drain: bool,
    /// Forwarded packets were written to it since its last timeout: str0m sends them
    /// once it is given one (`Sfu::kicked`).
    kicked: bool,
    addrs: Vec<SocketAddr>,
}

struct Room {
    name: String,
    pubs: Vec<usize>,
    subs: Vec<usize>,
}

/// The facts of one received datagram that its packets' records need.
#[derive(Clone, Copy, Default)]
struct Arrival {
    at: Option<Instant>,
    recv_ns: u64,
    kernel_ns: u64,
    index: u16,
    batch_len: u16,
}

pub struct Sfu {
    cfg: Config,
    sock: Socket,
    waker: Arc<Waker>,
    requests: Receiver<Request>,
    peers: Vec<Option<Peer>>,
    free: Vec<usize>,
    by_addr: HashMap<SocketAddr, usize>,
    by_id: HashMap<u64, usize>,
    rooms: Vec<Option<Room>>,
    room_by_name: HashMap<String, usize>,
    dirty: Vec<usize>,
    /// Subscribers with forwarded packets waiting for their timeout.
    kicked: Vec<usize>,
    recv: RecvBatch,
    send: SendBatch,
    pub counts: Counts,
    pub net: NetCounts,
    probes: Option<Probes>,
    cert: DtlsCert,
    next_id: u64,
    base: (Instant, u64),
    arrival: Arrival,
    realtime_offset: i64,
}

fn ns_of(base: (Instant, u64), t: Instant) -> u64 {
    base.1 + t.saturating_duration_since(base.0).as_nanos() as u64
}

fn slab_insert<T>(slab: &mut Vec<Option<T>>, free: &mut Vec<usize>, item: T) -> usize {
    if let Some(i) = free.pop() {
        slab[i] = Some(item);
        i
    } else {
        slab.push(Some(item));
        slab.len() - 1
    }
}

/// Whether an offer sends video in more than one layer: `a=simulcast` or several
/// `a=rid` in a video m-line.
fn offer_simulcast(sdp: &str) -> bool {
    let mut in_video = false;
    let mut rids = 0;
    for line in sdp.lines() {
        if let Some(rest) = line.strip_prefix("m=") {
            in_video = rest.starts_with("video");
            rids = 0;
        } else if in_video {
            if line.starts_with("a=simulcast:") {
                return true;
            }
            if line.starts_with("a=rid:") {
                rids += 1;
                if rids > 1 {
                    return true;
                }
            }
        }
    }
    false
}

/// The mids of an offer's m-lines of one kind, in order.
fn offer_mids(sdp: &str, kind: &str) -> Vec<Mid> {
    let mut out = Vec::new();
    let mut in_kind = false;
    for line in sdp.lines() {
        if let Some(rest) = line.strip_prefix("m=") {
            in_kind = rest.starts_with(kind);
        } else if in_kind {
            if let Some(mid) = line.strip_prefix("a=mid:") {
                out.push(Mid::from(mid.trim()));
            }
        }
    }
    out
}

impl Sfu {
    pub fn new(
        cfg: Config,
        sock: Socket,
        waker: Arc<Waker>,
        requests: Receiver<Request>,
        probes: Option<Probes>,
    ) -> Result<Sfu, String> {
        let provider = str0m::crypto::from_feature_flags();
        let cert = provider
            .dtls_provider
            .generate_certificate()
            .ok_or("cannot generate a DTLS certificate")?;
        provider.install_process_default();
        let recv = RecvBatch::new(cfg.batch, cfg.batched, cfg.pool);
        let send = SendBatch::new(cfg.batch * 4, cfg.batched, cfg.pool, cfg.gso);
        Ok(Sfu {
            dirty: Vec::with_capacity(cfg.max_peers * 2),
            kicked: Vec::with_capacity(cfg.max_peers),
            cfg,
            sock,
            waker,
            requests,
            peers: Vec::new(),
            free: Vec::new(),
            by_addr: HashMap::new(),
            by_id: HashMap::new(),
            rooms: Vec::new(),
            room_by_name: HashMap::new(),
            recv,
            send,
            counts: Counts::default(),
            net: NetCounts::default(),
            probes,
            cert,
            next_id: 1,
            base: (Instant::now(), monotonic_ns()),
            arrival: Arrival::default(),
            realtime_offset: probe::realtime_offset().unwrap_or(0),
        })
    }

    pub fn gso(&self) -> bool {
        self.sock.gso && self.cfg.gso
    }

    pub fn kernel_stamps(&self) -> bool {
        self.sock.kernel_stamps
    }

    pub fn tx_stamps(&self) -> bool {
        self.sock.tx_stamps
    }

    /// Runs until SIGINT/SIGTERM.
    pub fn run(&mut self) -> Result<(), String> {
        let mut more = false;
        while !STOP.load(Ordering::Relaxed) {
            self.send_forwarded();
            self.run_timers();
            self.flush();
            self.reap();
            if !more {
                let timeout = self
                    .next_deadline()
                    .map(|d| d.saturating_duration_since(Instant::now()).as_nanos() as u64);
                let ready = net::wait(&self.sock, &self.waker, timeout);
                self.counts.wakeups += 1;
                if ready.waker {
                    self.waker.clear();
                    self.handle_requests();
                }
                if ready.error {
                    self.send.discard_errors(&self.sock);
                }
                if !ready.socket {
                    continue;
                }
            }
            let n = self.recv.recv(&self.sock, &mut self.net)?;
            more = n == self.cfg.batch && self.cfg.batched;
            if n > 0 {
                self.handle_batch(n);
            }
        }
        self.shutdown();
        Ok(())
    }

    /// When to wake up next: the earliest deadline any peer asked for, plus the timer
    /// slack, so that the timers due within it (and the packets arriving meanwhile) are
    /// serviced in one wake-up.
    fn next_deadline(&self) -> Option<Instant> {
        let slack = Duration::from_nanos(self.cfg.timer_slack_ns);
        let earliest = self
            .peers
            .iter()
            .flatten()
            .map(|p| {
                let due = if p.slack {
                    p.deadline + slack
                } else {
                    p.deadline
                };
                if p.connected {
                    due
                } else {
                    due.min(p.created + CONNECT_TIMEOUT)
                }
            })
            .min()?;
        Some(earliest)
    }

    // ---- datagrams ----------------------------------------------------------------

    fn handle_batch(&mut self, n: usize) {
        let at = Instant::now();
        let mut chunk_start = at;
        let recv_ns = ns_of(self.base, at);
        if self.probes.is_some() {
            if let Some(off) = probe::realtime_offset() {
                self.realtime_offset = off;
            }
        }
        for i in 0..n {
            let d = self.recv.get(i);
            let source = d.source;
            let kernel_ns = d
                .kernel_realtime_ns
                .map_or(NONE, |k| (k as i64 - self.realtime_offset) as u64);
            self.arrival = Arrival {
                at: Some(at),
                recv_ns,
                kernel_ns,
                index: i as u16,
                batch_len: n as u16,
            };
            let idx = match self.by_addr.get(&source) {
                Some(&idx) => Some(idx),
                None => self.find_peer(i, at),
            };
            let Some(idx) = idx else {
                self.counts.unknown_source += 1;
                continue;
            };
            let d = self.recv.get(i);
            let Ok(receive) = Receive::new(
                Protocol::Udp,
                source,
                SocketAddr::V4(self.sock.local),
                d.data,
            ) else {
                self.counts.malformed += 1;
                continue;
            };
            let Some(peer) = self.peers[idx].as_mut() else {
                continue;
            };
            if peer.dead {
                continue;
            }
            let rtc = &mut peer.rtc;
            match catch_unwind(AssertUnwindSafe(|| {
                rtc.handle_input(Input::Receive(at, receive))
            })) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.counts.rtc_errors += 1;
                    log::debug!("{}: input: {e}", peer.name);
                }
                Err(_) => {
                    self.counts.panics += 1;
                    peer.dead = true;
                    log::error!("{}: str0m panicked on input; peer dropped", peer.name);
                    continue;
                }
            }
            peer.dirty = true;
            self.drain(idx);
            self.settle();
            // What this batch forwarded so far leaves once it has waited `--hold-us` (the
            // rest of the batch being processed meanwhile).
            if !self.kicked.is_empty() && i + 1 < n {
                let now = Instant::now();
                if now.saturating_duration_since(chunk_start).as_nanos() as u64 >= self.cfg.hold_ns
                {
                    self.send_forwarded();
                    self.run_timers();
                    self.flush();
                    chunk_start = now;
                }
            }
        }
        self.arrival = Arrival::default();
    }

    /// The peer a datagram from an unknown address belongs to: only STUN can say (its
    /// credentials); the address is then remembered.
    fn find_peer(&mut self, i: usize, at: Instant) -> Option<usize> {
        let d = self.recv.get(i);
        let first = *d.data.first()?;
        if first > 1 {
            return None;
        }
        let receive = Receive::new(
            Protocol::Udp,
            d.source,
            SocketAddr::V4(self.sock.local),
            d.data,
        )
        .ok()?;
        let input = Input::Receive(at, receive);
        let idx = self
            .peers
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| !p.dead && p.rtc.accepts(&input)))?;
        let peer = self.peers[idx].as_mut()?;
        if peer.addrs.len() < 8 {
            peer.addrs.push(d.source);
            self.by_addr.insert(d.source, idx);
        }
        Some(idx)
    }

    /// Drains one peer's output until its next timeout.
    fn drain(&mut self, idx: usize) {
        let Some(peer) = self.peers[idx].as_mut() else {
            return;
        };
        peer.dirty = false;
        peer.in_drain = true;
        loop {
            let Some(peer) = self.peers[idx].as_mut() else {
                return;
            };
            if peer.dead {
                break;
            }
            let rtc = &mut peer.rtc;
            let out = match catch_unwind(AssertUnwindSafe(|| rtc.poll_output())) {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => {
                    self.counts.rtc_errors += 1;
                    log::info!("{}: {e}; peer dropped", peer.name);
                    peer.dead = true;
                    break;
                }
                Err(_) => {
                    self.counts.panics += 1;
                    log::error!("{}: str0m panicked in poll_output; peer dropped", peer.name);
                    peer.dead = true;
                    break;
                }
            };
            match out {
                Output::Timeout(t) => {
                    peer.deadline = t;
                    peer.slack = !matches!(
                        peer.rtc.last_timeout_reason(),
                        Reason::Pacer(_) | Reason::SendStream | Reason::Packetize
                    );
                    break;
                }
                Output::Transmit(t) => self.transmit(idx, t.destination, &t.contents),
                Output::Event(e) => self.on_event(idx, e),
            }
        }
        if let Some(peer) = self.peers[idx].as_mut() {
            peer.in_drain = false;
        }
    }

    /// Drains every peer mutated since its last drain.
    fn settle(&mut self) {
        while let Some(idx) = self.dirty.pop() {
            if self.peers[idx].as_ref().is_some_and(|p| p.dirty) {
                self.drain(idx);
            }
        }
    }

    /// Prepares a peer for a mutation: drains the previous one first (unless its own
    /// drain loop is running, which will pick this one up), marks it dirty.
    fn before_mutation(&mut self, idx: usize) -> bool {
        let Some(peer) = self.peers[idx].as_ref() else {
            return false;
        };
        if peer.dead {
            return false;
        }
        if peer.dirty && !peer.in_drain {
            self.drain(idx);
        }
        let Some(peer) = self.peers[idx].as_mut() else {
            return false;
        };
        if !peer.dirty && !peer.in_drain {
            self.dirty.push(idx);
        }
        peer.dirty = true;
        !peer.dead
    }

    /// Notes that forwarded packets were written to subscriber `idx`: they go out at its
    /// next timeout, one for every packet written since (`send_forwarded`), not one per
    /// packet. Writing needs no drain before it: a write only queues.
    fn kick(&mut self, idx: usize) -> bool {
        let Some(peer) = self.peers[idx].as_mut() else {
            return false;
        };
        if peer.dead {
            return false;
        }
        if !peer.kicked {
            peer.kicked = true;
            self.kicked.push(idx);
        }
        true
    }

    /// Gives every kicked subscriber its timeout and drains it: without a bandwidth
    /// estimator str0m then sends everything written; with one, its pacer sends one
    /// packet and asks for another timeout at once (`run_timers`).
    fn send_forwarded(&mut self) {
        if self.kicked.is_empty() {
            return;
        }
        let now = Instant::now();
        while let Some(idx) = self.kicked.pop() {
            let Some(peer) = self.peers[idx].as_mut() else {
                continue;
            };
            peer.kicked = false;
            if !peer.dead {
                self.timeout(idx, now);
            }
        }
    }

    /// Hands peer `idx` a timeout (str0m's clock) and drains what it then wants to send;
    /// a panic in str0m drops the peer.
    fn timeout(&mut self, idx: usize, now: Instant) {
        let Some(peer) = self.peers[idx].as_mut() else {
            return;
        };
        self.counts.timer_inputs += 1;
        let rtc = &mut peer.rtc;
        match catch_unwind(AssertUnwindSafe(|| rtc.handle_input(Input::Timeout(now)))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.counts.rtc_errors += 1;
                log::debug!("{}: timeout: {e}", peer.name);
            }
            Err(_) => {
                self.counts.panics += 1;
                log::error!("{}: str0m panicked on a timeout; peer dropped", peer.name);
                peer.dead = true;
                return;
            }
        }
        peer.dirty = true;
        self.drain(idx);
        self.settle();
    }

    fn transmit(&mut self, idx: usize, dest: SocketAddr, data: &[u8]) {
        let record = if self.probes.is_some() {
            self.fwd_record(idx, data)
        } else {
            None
        };
        if self.send.is_full() {
            self.flush();
        }
        self.send.push(dest, data, record, &mut self.net);
        if !self.cfg.batched {
            self.flush();
        }
    }

    /// The `fwd` record of a datagram a subscriber leg sends (its RTP header is clear
    /// under SRTP), if it is a forwarded packet on a leg's primary SSRC.
    fn fwd_record(&self, idx: usize, data: &[u8]) -> Option<Record> {
        if data.len() < 12 || data[0] >> 6 != 2 || (192..=223).contains(&data[1]) {
            return None; // not RTP (RTCP has PT 192-223 with the marker bit)
        }
        let header = RtpHeader::parse(data)?;
        let peer = self.peers[idx].as_ref()?;
        let Role::Sub(sub) = &peer.role else {
            return None;
        };
        let leg = sub.slots.iter().find_map(|s| {
            let audio = s.audio.as_ref().filter(|l| l.ssrc == header.ssrc);
            audio.or_else(|| {
                s.video
                    .as_ref()
                    .map(|v| &v.leg)
                    .filter(|l| l.ssrc == header.ssrc)
            })
        })?;
        let (seq, src) = *leg.probe_map.get(header.seq as usize % PROBE_MAP)?;
        if seq != header.seq {
            return None;
        }
        Some(Record::fwd(
            0,
            sub.egress_pad,
            probe::THREAD_IDX,
            data.len() as u32,
            &header,
            &src,
        ))
    }

    fn flush(&mut self) {
        if self.send.is_empty() {
            return;
        }
        let probes = self.probes.as_ref();
        let offset = self.realtime_offset;
        self.send
            .flush(&self.sock, &mut self.net, |record, t_ns, kernel_tx| {
                if let (Some(p), Some(mut r)) = (probes, record) {
                    r.t_ns = t_ns;
                    r.duration = kernel_tx.map_or(NONE, |k| (k as i64 - offset) as u64);
                    p.record(r);
                }
            });
    }

    // ---- timers -------------------------------------------------------------------

    fn run_timers(&mut self) {
        // Rounds: a timeout's output can make a peer due at once again. With a bandwidth
        // estimator str0m's pacer hands out one packet per timeout, so a burst of N
        // packets to a leg takes N rounds; they run here, without sleeping in between.
        for _ in 0..MAX_TIMER_ROUNDS {
            let now = Instant::now();
            let mut any = false;
            for idx in 0..self.peers.len() {
                let Some(peer) = self.peers[idx].as_mut() else {
                    continue;
                };
                if peer.dead {
                    continue;
                }
                if !peer.connected && now >= peer.created + CONNECT_TIMEOUT {
                    log::info!(
                        "{}: not connected after {:?}; dropped",
                        peer.name,
                        CONNECT_TIMEOUT
                    );
                    peer.dead = true;
                    continue;
                }
                if peer.deadline > now {
                    continue;
                }
                any = true;
                self.timeout(idx, now);
            }
            if !any {
                break;
            }
        }
    }

    // ---- events -------------------------------------------------------------------

    fn on_event(&mut self, idx: usize, event: Event) {
        match event {
            Event::RtpPacket(packet) => self.forward(idx, packet),
            Event::Connected => self.on_connected(idx),
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) | Event::Closed => {
                if let Some(peer) = self.peers[idx].as_mut() {
                    log::info!("{}: gone", peer.name);
                    peer.dead = true;
                }
            }
            Event::KeyframeRequest(req) => self.on_keyframe_request(idx, req.mid, req.kind),
            Event::EgressBitrateEstimate(BweKind::Twcc { estimate, .. }) => {
                let room = match self.peers[idx].as_mut() {
                    Some(Peer {
                        role: Role::Sub(sub),
                        room,
                        ..
                    }) => {
                        sub.estimate_bps = estimate.as_u64();
                        *room
                    }
                    _ => return,
                };
                self.choose_layers(idx, room);
            }
            Event::StreamPaused(p) => {
                if let Some(Peer {
                    role: Role::Pub(publ),
                    ..
                }) = self.peers[idx].as_mut()
                {
                    if let Some(l) = publ.layers.iter_mut().find(|l| l.ssrc == *p.ssrc) {
                        if p.paused {
                            l.last_seen_ns = 0;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn on_connected(&mut self, idx: usize) {
        let Some(peer) = self.peers[idx].as_mut() else {
            return;
        };
        peer.connected = true;
        log::info!("{}: connected", peer.name);
        let room = peer.room;
        if matches!(peer.role, Role::Sub(_)) {
            self.choose_layers(idx, room);
        }
    }

    /// A subscriber asks for a key frame on one of its legs: ask the publisher of its
    /// slot for one on the layer the leg carries (or is about to).
    fn on_keyframe_request(&mut self, idx: usize, mid: Mid, kind: KeyframeRequestKind) {
        self.counts.keyframe_requests_in += 1;
        let Some(Peer {
            role: Role::Sub(sub),
            ..
        }) = self.peers[idx].as_ref()
        else {
            return;
        };
        let Some((publisher, layer)) = sub.slots.iter().find_map(|s| {
            let v = s.video.as_ref().filter(|v| v.leg.mid == mid)?;
            Some((s.publisher?, v.target.or(v.current)?))
        }) else {
            return;
        };
        if let Some(&pidx) = self.by_id.get(&publisher) {
            self.request_keyframe(pidx, layer, kind);
        }
    }

    fn request_keyframe(&mut self, pidx: usize, layer: usize, kind: KeyframeRequestKind) {
        let now_ns = monotonic_ns();
        let ssrc = match self.peers[pidx].as_mut() {
            Some(Peer {
                role: Role::Pub(publ),
                ..
            }) => match publ.layers.get_mut(layer) {
                Some(l) if now_ns.saturating_sub(l.last_pli_ns) >= PLI_EVERY_NS => {
                    l.last_pli_ns = now_ns;
                    l.ssrc
                }
                _ => return,
            },
            _ => return,
        };
        if !self.before_mutation(pidx) {
            return;
        }
        let Some(peer) = self.peers[pidx].as_mut() else {
            return;
        };
        if let Some(rx) = peer.rtc.direct_api().stream_rx(&Ssrc::from(ssrc)) {
            rx.request_keyframe(kind);
            self.counts.keyframe_requests_sent += 1;
        }
    }

    // ---- forwarding ---------------------------------------------------------------

    /// Which track of publisher `idx` an SSRC is: `Some(None)` audio, `Some(Some(layer))`
    /// a video layer, `None` unknown.
    fn track_of(&mut self, idx: usize, ssrc: u32) -> Option<Option<usize>> {
        let peer = self.peers[idx].as_mut()?;
        let Role::Pub(publ) = &mut peer.role else {
            return None;
        };
        if publ.audio_ssrc == Some(ssrc) {
            return Some(None);
        }
        if let Some(i) = publ.layers.iter().position(|l| l.ssrc == ssrc) {
            return Some(Some(i));
        }
        if publ.unknown.contains(&ssrc) {
            return None;
        }
        // First packet of this SSRC: ask str0m which media it belongs to.
        let mid = peer
            .rtc
            .direct_api()
            .stream_rx(&Ssrc::from(ssrc))
            .map(|s| s.mid());
        let Role::Pub(publ) = &mut peer.role else {
            return None;
        };
        match mid {
            Some(m) if Some(m) == publ.audio_mid && publ.audio_ssrc.is_none() => {
                publ.audio_ssrc = Some(ssrc);
                Some(None)
            }
            Some(m) if Some(m) == publ.video_mid && publ.layers.len() < MAX_LAYERS => {
                publ.layers.push(Layer {
                    ssrc,
                    ..Layer::default()
                });
                log::info!(
                    "{}: video layer {} (ssrc {ssrc})",
                    peer.name,
                    publ.layers.len()
                );
                Some(Some(publ.layers.len() - 1))
            }
            _ => {
                if publ.unknown.len() < 16 {
                    publ.unknown.push(ssrc);
                }
                None
            }
        }
    }

    fn forward(&mut self, pidx: usize, packet: RtpPacket) {
        self.counts.rtp_in += 1;
        let arrival = self.arrival;
        let arrival_ns = if arrival.recv_ns != 0 {
            arrival.recv_ns
        } else {
            monotonic_ns()
        };
        let wallclock = arrival.at.unwrap_or_else(Instant::now);
        let h = &packet.header;
        let in_ssrc: u32 = *h.ssrc;
        let in_ts = h.timestamp;
        let in_seq: u64 = *packet.seq_no;
        if let Some(p) = &self.probes {
            let mut r = Record::empty(
                arrival_ns,
                probe::INGRESS_PAD,
                probe::THREAD_IDX,
                kind::PUSH,
            );
            r.offset = arrival.kernel_ns;
            r.size = packet.payload.len() as u32;
            r.list_index = arrival.index;
            if arrival.batch_len > 1 {
                r.flags |= lltrace::flags::IN_LIST;
            }
            r.set_rtp(&RtpHeader {
                ssrc: in_ssrc,
                timestamp: in_ts,
                seq: h.sequence_number,
                payload_type: *h.payload_type,
                marker: h.marker,
            });
            p.record(r);
        }
        let Some(track) = self.track_of(pidx, in_ssrc) else {
            self.counts.not_forwarded += 1;
            return;
        };
        let (publisher_id, room) = match self.peers[pidx].as_ref() {
            Some(p) => (p.id, p.room),
            None => return,
        };
        // Video: what the payload says, and the layer's rate.
        let mut info = Vp8Info::default();
        let mut rates_due = false;
        if let Some(layer) = track {
            info = vp8_info(&packet.payload).unwrap_or_default();
            if let Some(Peer {
                role: Role::Pub(publ),
                ..
            }) = self.peers[pidx].as_mut()
            {
                let l = &mut publ.layers[layer];
                l.bytes += packet.payload.len() as u64 + 12;
                l.last_seen_ns = arrival_ns;
                if info.keyframe && info.width > 0 {
                    l.width = info.width;
                }
                if l.window_start_ns == 0 {
                    l.window_start_ns = arrival_ns;
                } else if arrival_ns - l.window_start_ns >= RATE_WINDOW_NS {
                    l.bps = l.bytes * 8 * 1_000_000_000 / (arrival_ns - l.window_start_ns);
                    l.bytes = 0;
                    l.window_start_ns = arrival_ns;
                    rates_due = true;
                }
            }
        }
        let source = FwdSource {
            recv_ns: arrival_ns,
            kernel_ns: arrival.kernel_ns,
            ssrc: in_ssrc,
            timestamp: in_ts,
            seq: h.sequence_number,
        };
        let Some(room_ref) = self.rooms[room].as_ref() else {
            return;
        };
        let nsubs = room_ref.subs.len();
        let mut sent_any = false;
        for k in 0..nsubs {
            let Some(sidx) = self.rooms[room]
                .as_ref()
                .and_then(|r| r.subs.get(k).copied())
            else {
                break;
            };
            let ready = self.peers[sidx]
                .as_ref()
                .is_some_and(|p| p.connected && !p.dead);
            if !ready {
                continue;
            }
            // The leg's decision, then the write.
            let decision = {
                let Some(Peer {
                    role: Role::Sub(sub),
                    ..
                }) = self.peers[sidx].as_mut()
                else {
                    continue;
                };
                let Some(slot) = sub
                    .slots
                    .iter_mut()
                    .find(|s| s.publisher == Some(publisher_id))
                else {
                    continue;
                };
                match track {
                    None => slot.audio.as_mut().and_then(|leg| {
                        if leg.rebase {
                            leg.rebase = false;
                            leg.rewrite.rebase(in_seq, in_ts, arrival_ns);
                        }
                        let (seq, ts) = leg.rewrite.map(in_seq, in_ts, arrival_ns)?;
                        Some((leg.mid, leg.pt?, seq, ts, None, &mut leg.probe_map))
                    }),
                    Some(layer) => slot.video.as_mut().and_then(|v| {
                        if v.target == Some(layer) && v.current != Some(layer) && info.keyframe {
                            v.current = Some(layer);
                            v.leg.rewrite.rebase(in_seq, in_ts, arrival_ns);
                            v.leg.rebase = false;
                            v.pics.rebase(&info);
                            self.counts.layer_switches += 1;
                        }
                        if v.current != Some(layer) {
                            return None;
                        }
                        let (seq, ts) = v.leg.rewrite.map(in_seq, in_ts, arrival_ns)?;
                        let (pic, tl0) = v.pics.map(&info);
                        let patch = if pic.is_some() || tl0.is_some() {
                            Vp8Descriptor::parse(&packet.payload).ok().and_then(|d| {
                                let mut b = d.patch();
                                if let Some(p) = pic {
                                    b = b.picture_id(p);
                                }
                                if let Some(t) = tl0 {
                                    b = b.tl0_pic_idx(t);
                                }
                                b.build().ok()
                            })
                        } else {
                            None
                        };
                        Some((v.leg.mid, v.leg.pt?, seq, ts, patch, &mut v.leg.probe_map))
                    }),
                }
                .map(|(mid, pt, seq, ts, patch, probe_map)| {
                    if !probe_map.is_empty() {
                        probe_map[seq as usize % PROBE_MAP] = (seq as u16, source);
                    }
                    (mid, pt, seq, ts, patch)
                })
            };
            let Some((mid, pt, seq, ts, patch)) = decision else {
                continue;
            };
            if !self.kick(sidx) {
                continue;
            }
            let Some(peer) = self.peers[sidx].as_mut() else {
                continue;
            };
            let ext = ExtensionValues {
                audio_level: packet.header.ext_vals.audio_level,
                voice_activity: packet.header.ext_vals.voice_activity,
                video_orientation: packet.header.ext_vals.video_orientation,
                ..ExtensionValues::default()
            };
            let mut write =
                RtpWrite::new(pt, SeqNo::from(seq), ts, wallclock, packet.payload.clone())
                    .marker(packet.header.marker)
                    .ext_vals(ext)
                    .nackable(track.is_some());
            if let Some(p) = patch {
                write = write.vp8_patch(p);
            }
            if let Some(tx) = peer.rtc.direct_api().stream_tx_by_mid(mid, None) {
                tx.write_rtp(write);
                self.counts.forwarded += 1;
                sent_any = true;
            }
        }
        if !sent_any {
            self.counts.not_forwarded += 1;
        }
        if rates_due {
            for k in 0..nsubs {
                if let Some(sidx) = self.rooms[room]
                    .as_ref()
                    .and_then(|r| r.subs.get(k).copied())
                {
                    self.choose_layers(sidx, room);
                }
            }
        }
    }

    /// Re-chooses the layer of each video leg of subscriber `sidx` from its estimate
    /// (shared equally among its video legs); asks for a key frame on a new target,
    /// tells its bandwidth estimator what the next layer up would need.
    fn choose_layers(&mut self, sidx: usize, room: usize) {
        let now_ns = monotonic_ns();
        let Some(Peer {
            role: Role::Sub(sub),
            connected: true,
            ..
        }) = self.peers[sidx].as_ref()
        else {
            return;
        };
        let legs = sub
            .slots
            .iter()
            .filter(|s| s.video.is_some() && s.publisher.is_some())
            .count()
            .max(1) as u64;
        let budget = sub.estimate_bps / legs;
        let mut requests: [(u64, usize); MAX_SLOTS] = [(0, 0); MAX_SLOTS];
        let mut nreq = 0;
        let mut wanted = 0u64;
        let mut next_up = 0u64;
        for slot_i in 0..MAX_SLOTS {
            let Some(Peer {
                role: Role::Sub(sub),
                ..
            }) = self.peers[sidx].as_ref()
            else {
                return;
            };
            let Some(slot) = sub.slots.get(slot_i) else {
                break;
            };
            let (Some(publisher), Some(v)) = (slot.publisher, slot.video.as_ref()) else {
                continue;
            };
            let Some(&pidx) = self.by_id.get(&publisher) else {
                continue;
            };
            let Some(Peer {
                role: Role::Pub(publ),
                room: proom,
                ..
            }) = self.peers[pidx].as_ref()
            else {
                continue;
            };
            if *proom != room {
                continue;
            }
            let mut rates = [LayerRate::default(); MAX_LAYERS];
            for (i, l) in publ.layers.iter().enumerate() {
                rates[i] = LayerRate {
                    active: now_ns.saturating_sub(l.last_seen_ns) < LAYER_IDLE_NS,
                    width: l.width,
                    bps: l.bps,
                };
            }
            let rates = &rates[..publ.layers.len()];
            let Some(mut choice) = choose_layer(rates, budget) else {
                continue;
            };
            // No going up again soon after going down (the estimate recovers in steps).
            if let Some(cur) = v.current {
                let up =
                    (rates[choice].width, rates[choice].bps) > (rates[cur].width, rates[cur].bps);
                if up
                    && now_ns.saturating_sub(v.last_down_ns) < UP_AFTER_DOWN_NS
                    && rates[cur].active
                {
                    choice = cur;
                }
            }
            wanted = wanted.max(rates.iter().map(|r| r.bps).max().unwrap_or(0));
            next_up = next_up.max(
                rates
                    .iter()
                    .filter(|r| {
                        r.active && (r.width, r.bps) > (rates[choice].width, rates[choice].bps)
                    })
                    .map(|r| r.bps)
                    .min()
                    .unwrap_or(0), // at the top: nothing to probe for
            );
            let current = v.current;
            let Some(Peer {
                role: Role::Sub(sub),
                ..
            }) = self.peers[sidx].as_mut()
            else {
                return;
            };
            let v = sub.slots[slot_i].video.as_mut().expect("checked above");
            v.target = Some(choice);
            // A leg not yet on its target waits for a key frame of it: ask (again; the
            // requests are rate-limited per layer).
            if current != Some(choice) && nreq < MAX_SLOTS {
                requests[nreq] = (publisher, choice);
                nreq += 1;
            }
            if current.is_some_and(|c| {
                (rates[choice].width, rates[choice].bps) < (rates[c].width, rates[c].bps)
            }) {
                v.last_down_ns = now_ns;
            }
        }
        for &(publisher, layer) in &requests[..nreq] {
            if let Some(&pidx) = self.by_id.get(&publisher) {
                self.request_keyframe(pidx, layer, KeyframeRequestKind::Pli);
            }
        }
        if wanted > 0 && self.before_mutation(sidx) {
            if let Some(peer) = self.peers[sidx].as_mut() {
                // What the best layer needs with the choice's headroom (and a little
                // more to probe for), and what the next layer up needs: padding up to
                // that lets the estimate grow past it.
                let audio = crate::forward::AUDIO_BPS;
                let need = |bps: u64| (bps as f64 * crate::forward::HEADROOM) as u64 * legs + audio;
                let desired = (need(wanted) + need(wanted) / 10).max(100_000);
                let minimum = if next_up > 0 {
                    need(next_up).min(desired)
                } else {
                    0
                };
                peer.rtc
                    .bwe()
                    .set_bitrate(Bitrate::bps(minimum), Bitrate::bps(desired));
            }
        }
    }

    // ---- signalling ---------------------------------------------------------------

    fn handle_requests(&mut self) {
        while let Ok(req) = self.requests.try_recv() {
            match req {
                Request::Publish {
                    room,
                    name,
                    offer,
                    reply,
                } => {
                    let r = self.join(&room, name, &offer, true);
                    let _ = reply.send(r);
                }
                Request::Subscribe {
                    room,
                    name,
                    offer,
                    reply,
                } => {
                    let r = self.join(&room, name, &offer, false);
                    let _ = reply.send(r);
                }
                Request::Leave { id, reply } => {
                    let r = match self.by_id.get(&id) {
                        Some(&idx) => {
                            if let Some(p) = self.peers[idx].as_mut() {
                                p.rtc.disconnect();
                                p.dead = true;
                            }
                            Reply::Left
                        }
                        None => Reply::Error(404, format!("no such resource: {id}")),
                    };
                    let _ = reply.send(r);
                }
                Request::Stats { reply } => {
                    // a Leave answered in this batch is counted as left, not pending
                    self.reap();
                    let _ = reply.send(Reply::Stats(self.stats_json()));
                }
            }
        }
        self.reap();
    }

    /// Whether a subscriber joining `room_name` now gets a bandwidth estimator (`--bwe`):
    /// with `auto`, unless the room has publishers and every one sends a single video
    /// layer (then no leg has a layer to choose, and the estimator would only cost: its
    /// pacer releases one packet per timeout and it pads every leg to 50 kbit/s).
    fn subscriber_bwe(&self, room_name: &str) -> bool {
        match self.cfg.bwe {
            BweMode::On => true,
            BweMode::Off => false,
            BweMode::Auto => {
                let Some(room) = self
                    .room_by_name
                    .get(room_name)
                    .and_then(|&r| self.rooms[r].as_ref())
                else {
                    return true;
                };
                let (mut pubs, mut simulcast) = (0, false);
                for &i in &room.pubs {
                    if let Some(Peer {
                        role: Role::Pub(p),
                        dead: false,
                        ..
                    }) = self.peers[i].as_ref()
                    {
                        pubs += 1;
                        simulcast |= p.simulcast || p.layers.len() > 1;
                    }
                }
                simulcast || pubs == 0
            }
        }
    }

    fn rtc_config(&self, bwe: bool) -> RtcConfig {
        let mut cfg = RtcConfig::new()
            .set_rtp_mode(true)
            .set_ice_lite(true)
            .set_dtls_cert(self.cert.clone())
            .clear_codecs()
            .enable_opus(true, false)
            .enable_vp8(true)
            .set_stats_interval(None);
        if bwe {
            cfg = cfg.enable_bwe(Some(Bitrate::kbps(self.cfg.bwe_initial_kbps)));
        }
        cfg
    }

    fn join(
        &mut self,
        room_name: &str,
        name: Option<String>,
        offer_sdp: &str,
        publisher: bool,
    ) -> Reply {
        let live = self.peers.iter().flatten().filter(|p| !p.dead).count();
        if live >= self.cfg.max_peers {
            return Reply::Error(503, format!("full: {} peers", self.cfg.max_peers));
        }
        let offer = match SdpOffer::from_sdp_string(offer_sdp) {
            Ok(o) => o,
            Err(e) => return Reply::Error(400, format!("bad SDP offer: {e}")),
        };
        let audio_mids = offer_mids(offer_sdp, "audio");
        let video_mids = offer_mids(offer_sdp, "video");
        if audio_mids.is_empty() && video_mids.is_empty() {
            return Reply::Error(400, "the offer has no audio or video".into());
        }
        let now = Instant::now();
        let bwe = !publisher && self.subscriber_bwe(room_name);
        let mut rtc = self.rtc_config(bwe).build(now);
        let local = SocketAddr::V4(SocketAddrV4::new(self.cfg.bind, self.sock.local.port()));
        match Candidate::host(local, "udp") {
            Ok(c) => {
                rtc.add_local_candidate(c);
            }
            Err(e) => return Reply::Error(500, format!("candidate: {e}")),
        }
        let answer = match rtc.sdp_api().accept_offer(offer) {
            Ok(a) => a.to_sdp_string(),
            Err(e) => return Reply::Error(400, format!("offer not accepted: {e}")),
        };
        let id = self.next_id;
        self.next_id += 1;
        let name = name.unwrap_or_else(|| format!("{}{id}", if publisher { "pub" } else { "sub" }));
        // The room.
        let room = match self.room_by_name.get(room_name) {
            Some(&r) => r,
            None => {
                if self.room_by_name.len() >= self.cfg.max_peers {
                    return Reply::Error(503, "too many rooms".into());
                }
                let mut free = Vec::new();
                let r = slab_insert(
                    &mut self.rooms,
                    &mut free,
                    Room {
                        name: room_name.to_string(),
                        pubs: Vec::new(),
                        subs: Vec::new(),
                    },
                );
                self.room_by_name.insert(room_name.to_string(), r);
                r
            }
        };
        let role = if publisher {
            Role::Pub(Publisher {
                audio_mid: audio_mids.first().copied(),
                video_mid: video_mids.first().copied(),
                simulcast: offer_simulcast(offer_sdp),
                ..Publisher::default()
            })
        } else {
            let egress_pad = match self.probes.as_mut() {
                Some(p) => p.add_egress(&name),
                None => 0,
            };
            let probe_len = if self.probes.is_some() { PROBE_MAP } else { 0 };
            let pace = self.cfg.pace;
            let seed = (monotonic_ns() as u16 & 0x3fff) | 1;
            let mut slots = Vec::new();
            for i in 0..audio_mids.len().max(video_mids.len()).min(MAX_SLOTS) {
                let leg = |mid: Mid, kind: MediaKind, rtc: &mut Rtc, salt: u16| -> Option<Leg> {
                    let media = rtc.media(mid)?;
                    if media.kind() != kind || !media.direction().is_sending() {
                        return None;
                    }
                    let codec = if kind == MediaKind::Audio {
                        Codec::Opus
                    } else {
                        Codec::Vp8
                    };
                    let remote = media.remote_pts().to_vec();
                    let pt = rtc
                        .codec_config()
                        .params()
                        .iter()
                        .find(|p| p.spec().codec == codec && remote.contains(&p.pt()))
                        .map(|p| p.pt());
                    let mut api = rtc.direct_api();
                    let tx = api.stream_tx_by_mid(mid, None)?;
                    // Forwarded media leaves as it arrives; the layer choice keeps a leg
                    // within its estimate (--pace: str0m's leaky bucket paces video).
                    tx.set_unpaced(!pace);
                    let ssrc = *tx.ssrc();
                    let clock = if kind == MediaKind::Audio {
                        48_000
                    } else {
                        90_000
                    };
                    Some(Leg {
                        mid,
                        pt,
                        ssrc,
                        rewrite: Rewrite::new(seed.wrapping_add(salt), clock),
                        rebase: false,
                        probe_map: vec![(0, FwdSource::default()); probe_len],
                    })
                };
                let audio = audio_mids
                    .get(i)
                    .and_then(|&m| leg(m, MediaKind::Audio, &mut rtc, i as u16 * 2));
                let video = video_mids
                    .get(i)
                    .and_then(|&m| leg(m, MediaKind::Video, &mut rtc, i as u16 * 2 + 1))
                    .map(|leg| VideoLeg {
                        leg,
                        current: None,
                        target: None,
                        pics: PictureIds::default(),
                        last_down_ns: 0,
                    });
                slots.push(Slot {
                    publisher: None,
                    audio,
                    video,
                });
            }
            if slots.iter().all(|s| s.audio.is_none() && s.video.is_none()) {
                return Reply::Error(400, "a WHEP offer needs receive-only audio or video".into());
            }
            Role::Sub(Subscriber {
                slots,
                bwe,
                estimate_bps: self.cfg.bwe_initial_kbps * 1000,
                egress_pad,
            })
        };
        let deadline = now;
        let peer = Peer {
            id,
            name: name.clone(),
            room,
            rtc,
            role,
            deadline,
            slack: false,
            created: now,
            connected: false,
            dead: false,
            dirty: true,
            in_drain: false,
            kicked: false,
            addrs: Vec::new(),
        };
        let idx = slab_insert(&mut self.peers, &mut self.free, peer);
        self.by_id.insert(id, idx);
        self.counts.joined += 1;
        if let Some(r) = self.rooms[room].as_mut() {
            if publisher {
                r.pubs.push(idx);
            } else {
                r.subs.push(idx);
            }
        }
        self.assign_slots(room);
        self.dirty.push(idx);
        self.settle();
        log::info!(
            "{name}: {} room {room_name} (resource {id}){}",
            if publisher {
                "publishes in"
            } else {
                "subscribes to"
            },
            match (publisher, bwe) {
                (true, _) => "",
                (false, true) => ", bandwidth estimator on",
                (false, false) => ", no bandwidth estimator",
            }
        );
        Reply::Created { id, answer }
    }

    /// Gives every subscriber of the room a slot for each publisher (join order), as
    /// far as its offer has slots.
    fn assign_slots(&mut self, room: usize) {
        let Some(r) = self.rooms[room].as_ref() else {
            return;
        };
        let pubs: Vec<u64> = r
            .pubs
            .iter()
            .filter_map(|&i| self.peers[i].as_ref().filter(|p| !p.dead).map(|p| p.id))
            .collect();
        let subs = r.subs.clone();
        for sidx in subs {
            let Some(Peer {
                role: Role::Sub(sub),
                ..
            }) = self.peers[sidx].as_mut()
            else {
                continue;
            };
            for slot in &mut sub.slots {
                if slot.publisher.is_some_and(|p| !pubs.contains(&p)) {
                    slot.publisher = None;
                }
            }
            for &p in &pubs {
                if sub.slots.iter().any(|s| s.publisher == Some(p)) {
                    continue;
                }
                if let Some(slot) = sub.slots.iter_mut().find(|s| s.publisher.is_none()) {
                    slot.publisher = Some(p);
                    if let Some(a) = slot.audio.as_mut() {
                        a.rebase = true;
                    }
                    if let Some(v) = slot.video.as_mut() {
                        v.current = None;
                        v.target = None;
                        v.leg.rebase = true;
                    }
                }
            }
        }
        let subs = self.rooms[room]
            .as_ref()
            .map(|r| r.subs.clone())
            .unwrap_or_default();
        for sidx in subs {
            self.choose_layers(sidx, room);
        }
    }

    /// Removes dead peers (and empty rooms).
    fn reap(&mut self) {
        let mut rooms_changed: [usize; 8] = [usize::MAX; 8];
        let mut nchanged = 0;
        for idx in 0..self.peers.len() {
            if !self.peers[idx].as_ref().is_some_and(|p| p.dead) {
                continue;
            }
            let Some(mut peer) = self.peers[idx].take() else {
                continue;
            };
            peer.rtc.disconnect();
            self.free.push(idx);
            self.by_id.remove(&peer.id);
            for a in &peer.addrs {
                if self.by_addr.get(a) == Some(&idx) {
                    self.by_addr.remove(a);
                }
            }
            self.counts.left += 1;
            log::info!("{}: left", peer.name);
            if let Some(r) = self.rooms[peer.room].as_mut() {
                r.pubs.retain(|&i| i != idx);
                r.subs.retain(|&i| i != idx);
                if r.pubs.is_empty() && r.subs.is_empty() {
                    self.room_by_name.remove(&r.name);
                    self.rooms[peer.room] = None;
                } else if nchanged < rooms_changed.len() && !rooms_changed.contains(&peer.room) {
                    rooms_changed[nchanged] = peer.room;
                    nchanged += 1;
                }
            }
        }
        for &room in &rooms_changed[..nchanged] {
            self.assign_slots(room);
        }
        // Room slots are reused only through the name map; compact the tail.
        while matches!(self.rooms.last(), Some(None)) {
            self.rooms.pop();
        }
        self.settle();
    }

    fn shutdown(&mut self) {
        for p in self.peers.iter_mut().flatten() {
            p.rtc.disconnect();
            p.dead = true;
        }
        self.reap();
        self.flush();
    }

    /// Closes the probes (END chunk); records dropped for a full ring.
    pub fn finish_probes(&mut self) -> Result<u64, String> {
        match self.probes.take() {
            Some(p) => p.finish(),
            None => Ok(0),
        }
    }

    pub fn stats_json(&self) -> String {
        let c = &self.counts;
        let n = &self.net;
        let mut legs = Vec::new();
        for p in self.peers.iter().flatten() {
            let Role::Sub(sub) = &p.role else { continue };
            for s in &sub.slots {
                let Some(publisher) = s.publisher else {
                    continue;
                };
                let pub_name = self
                    .by_id
                    .get(&publisher)
                    .and_then(|&i| self.peers[i].as_ref())
                    .map_or("?", |p| p.name.as_str());
                let (current, width) = s
                    .video
                    .as_ref()
                    .and_then(|v| {
                        let cur = v.current?;
                        let pidx = *self.by_id.get(&publisher)?;
                        match &self.peers[pidx].as_ref()?.role {
                            Role::Pub(publ) => Some((cur as i64, publ.layers.get(cur)?.width)),
                            _ => None,
                        }
                    })
                    .unwrap_or((-1, 0));
                legs.push(format!(
                    "{{\"subscriber\":\"{}\",\"publisher\":\"{}\",\"layer\":{},\"width\":{},\"bwe\":{},\"estimate_bps\":{}}}",
                    p.name, pub_name, current, width, sub.bwe, sub.estimate_bps
                ));
            }
        }
        let peers = self.peers.iter().flatten().filter(|p| !p.dead).count();
        let connected = self
            .peers
            .iter()
            .flatten()
            .filter(|p| !p.dead && p.connected)
            .count();
        format!(
            "{{\"peers\":{peers},\"connected\":{connected},\"rtp_in\":{},\"forwarded\":{},\"not_forwarded\":{},\
             \"datagrams_in\":{},\"datagrams_out\":{},\"recv_calls\":{},\"send_calls\":{},\
             \"gso_messages\":{},\"send_dropped\":{},\"layer_switches\":{},\
             \"keyframe_requests_sent\":{},\"keyframe_requests_in\":{},\"unknown_source\":{},\
             \"malformed\":{},\"rtc_errors\":{},\"panics\":{},\"joined\":{},\"left\":{},\
             \"wakeups\":{},\"timer_inputs\":{},\"allocations\":{},\"legs\":[{}]}}",
            c.rtp_in,
            c.forwarded,
            c.not_forwarded,
            n.datagrams_in,
            n.datagrams_out,
            n.recv_calls,
            n.send_calls,
            n.gso_messages,
            n.send_dropped,
            c.layer_switches,
            c.keyframe_requests_sent,
            c.keyframe_requests_in,
            c.unknown_source,
            c.malformed,
            c.rtc_errors,
            c.panics,
            c.joined,
            c.left,
            c.wakeups,
            c.timer_inputs,
            crate::alloc::count(),
            legs.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mids_of_each_kind() {
        let sdp = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\nm=audio 9 x\r\na=mid:a2\r\n";
        assert_eq!(
            offer_mids(sdp, "audio"),
            vec![Mid::from("0"), Mid::from("a2")]
        );
        assert_eq!(offer_mids(sdp, "video"), vec![Mid::from("1")]);
    }
}

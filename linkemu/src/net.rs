//! AF_PACKET sockets bound to one interface, and what the log records of a frame.

use std::ffi::CString;
use std::mem::{size_of, zeroed};

use lltrace::RtpHeader;

use crate::log::Record;

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const PACKET_OUTGOING: u8 = 4;
const SOL_PACKET: i32 = 263;
const PACKET_ADD_MEMBERSHIP: i32 = 1;
const PACKET_MR_PROMISC: u16 = 1;
const PACKET_QDISC_BYPASS: i32 = 20;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const SOCKET_BUFFER: i32 = 8 << 20;

/// A promiscuous raw packet socket on one interface (ETH_P_ALL).
pub struct PacketSocket {
    fd: i32,
}

/// A frame received: its length (the real one, even if it did not fit) and whether it fit.
pub struct Received {
    pub len: usize,
    pub truncated: bool,
}

fn os_error(what: &str, iface: &str) -> String {
    format!("{what} on '{iface}': {}", std::io::Error::last_os_error())
}

fn set_opt(fd: i32, level: i32, name: i32, value: &impl Sized) -> bool {
    // SAFETY: `value` points to a live value of the given size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const _ as *const libc::c_void,
            size_of_val(value) as libc::socklen_t,
        ) == 0
    }
}

/// A raw packet socket for every protocol (ETH_P_ALL); `what` names it in an error.
fn raw_socket(what: &str) -> Result<i32, String> {
    // SAFETY: plain syscall with valid arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            i32::from(ETH_P_ALL.to_be()),
        )
    };
    if fd < 0 {
        return Err(os_error("socket(AF_PACKET)", what));
    }
    Ok(fd)
}

impl PacketSocket {
    /// Open, bind to `iface`, enable promiscuous mode; `recv` times out after 100 ms.
    pub fn open(iface: &str) -> Result<PacketSocket, String> {
        let name = CString::new(iface).map_err(|_| format!("bad interface name '{iface}'"))?;
        // SAFETY: plain syscalls with valid arguments.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(os_error("no such interface", iface));
        }
        let fd = raw_socket(iface)?;
        let sock = PacketSocket { fd };
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = ifindex;
        let bound = unsafe {
            libc::bind(
                fd,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if bound != 0 {
            return Err(os_error("bind", iface));
        }
        let mut mreq: libc::packet_mreq = unsafe { zeroed() };
        mreq.mr_ifindex = ifindex;
        mreq.mr_type = PACKET_MR_PROMISC;
        if !set_opt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq) {
            return Err(os_error("promiscuous mode", iface));
        }
        // Best effort: our own sends are also filtered in `recv`.
        set_opt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32);
        set_opt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32);
        if !set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &SOCKET_BUFFER) {
            set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &SOCKET_BUFFER);
        }
        if !set_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &SOCKET_BUFFER) {
            set_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &SOCKET_BUFFER);
        }
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout);
        Ok(sock)
    }

    /// Receive one incoming frame into `buf` (frames this host sent are skipped).
    /// None on timeout or interruption.
    pub fn recv(&self, buf: &mut [u8]) -> Option<Received> {
        loop {
            let mut from: libc::sockaddr_ll = unsafe { zeroed() };
            let mut from_len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are valid for the given lengths.
            let n = unsafe {
                libc::recvfrom(
                    self.fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_TRUNC,
                    &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut from_len,
                )
            };
            if n < 0 {
                return None;
            }
            if from.sll_pkttype == PACKET_OUTGOING {
                continue;
            }
            let len = n as usize;
            return Some(Received {
                len,
                truncated: len > buf.len(),
            });
        }
    }

    /// Send one complete Ethernet frame out of the interface; whether the kernel took it.
    pub fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is valid for its length.
        let n = unsafe {
            libc::send(
                self.fd,
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
            )
        };
        n == frame.len() as isize
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.fd) };
    }
}

const PACKET_STATISTICS: i32 = 6;
const ARPHRD_LOOPBACK: u16 = 772;

/// A raw packet socket on every interface of the network namespace it was opened in, for
/// the traffic of the host itself: frames it receives and frames it sends (loopback
/// skipped), each with the kernel's timestamp (SO_TIMESTAMPNS: CLOCK_REALTIME, taken
/// when the frame entered the stack or reached the device on its way out).
pub struct CaptureSocket {
    fd: i32,
}

/// A frame captured: its real length, whether it fit, its direction and the kernel's
/// timestamp (None if the kernel gave none).
pub struct Captured {
    pub len: usize,
    pub truncated: bool,
    pub outgoing: bool,
    pub realtime_ns: Option<u64>,
}

/// Room for the control messages of one `recvmsg` (one `timespec`), 8-byte aligned.
pub type Control = [u64; 8];

impl CaptureSocket {
    /// Open (ETH_P_ALL, every interface) with kernel timestamps; `recv` times out after
    /// 100 ms.
    pub fn open() -> Result<CaptureSocket, String> {
        let all = "every interface";
        let fd = raw_socket(all)?;
        let sock = CaptureSocket { fd };
        if !set_opt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32) {
            return Err(os_error("SO_TIMESTAMPNS", all));
        }
        if !set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &SOCKET_BUFFER) {
            set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &SOCKET_BUFFER);
        }
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout);
        Ok(sock)
    }

    /// Receive the next frame (loopback frames skipped) into `buf`; None on timeout or
    /// interruption. `control` is scratch space for the timestamp, reused every call.
    pub fn recv(&self, buf: &mut [u8], control: &mut Control) -> Option<Captured> {
        loop {
            let mut from: libc::sockaddr_ll = unsafe { zeroed() };
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
            let mut msg: libc::msghdr = unsafe { zeroed() };
            msg.msg_name = &mut from as *mut libc::sockaddr_ll as *mut libc::c_void;
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = size_of::<Control>();
            // SAFETY: `msg` describes valid buffers.
            let n = unsafe { libc::recvmsg(self.fd, &mut msg, libc::MSG_TRUNC) };
            if n < 0 {
                return None;
            }
            if from.sll_hatype == ARPHRD_LOOPBACK {
                continue;
            }
            let len = n as usize;
            return Some(Captured {
                len,
                truncated: len > buf.len(),
                outgoing: from.sll_pkttype == PACKET_OUTGOING,
                realtime_ns: kernel_timestamp(&msg),
            });
        }
    }

    /// Frames the kernel dropped because this socket's buffer was full, since the last
    /// call (PACKET_STATISTICS resets its counters when read).
    pub fn drops(&self) -> u64 {
        let mut stats = [0u32; 2]; // struct tpacket_stats { tp_packets, tp_drops }
        let mut len = size_of::<[u32; 2]>() as libc::socklen_t;
        // SAFETY: `stats` is valid for `len` bytes.
        let ok = unsafe {
            libc::getsockopt(
                self.fd,
                SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        } == 0;
        if ok {
            u64::from(stats[1])
        } else {
            0
        }
    }
}

/// The SCM_TIMESTAMPNS control message of a received message, in nanoseconds.
fn kernel_timestamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros stay within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

impl Drop for CaptureSocket {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.fd) };
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Whether the frame is IPv4 (the only traffic that is impaired).
pub fn is_ipv4(frame: &[u8]) -> bool {
    frame.len() >= 34 && be16(frame, 12) == ETH_P_IP
}

/// Fill the packet fields of `rec` from an Ethernet frame: ethertype, IPv4 protocol,
/// addresses and ports (first fragments only), and over UDP either the MPEG-TS facts
/// of an SRT data packet or plain TS payload (see [`inspect_ts`]) or RTP v2 header fields.
pub fn inspect(frame: &[u8], rec: &mut Record) {
    if frame.len() < 14 {
        return;
    }
    rec.ethertype = be16(frame, 12);
    if !is_ipv4(frame) || frame[14] >> 4 != 4 {
        return;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    rec.ip_proto = frame[23];
    rec.src_ip = be32(frame, 26);
    rec.dst_ip = be32(frame, 30);
    let first_fragment = be16(frame, 20) & 0x1fff == 0;
    let l4 = 14 + ihl;
    if !first_fragment || ihl < 20 || frame.len() < l4 + 4 {
        return;
    }
    if rec.ip_proto == libc::IPPROTO_UDP as u8 || rec.ip_proto == libc::IPPROTO_TCP as u8 {
        rec.src_port = be16(frame, l4);
        rec.dst_port = be16(frame, l4 + 2);
    }
    if rec.ip_proto != libc::IPPROTO_UDP as u8 || frame.len() < l4 + 8 {
        return;
    }
    // The UDP length bounds the payload (short frames carry Ethernet padding); a payload
    // cut by fragmentation is what the frame holds.
    let udp_len = usize::from(be16(frame, l4 + 4)).max(8);
    let end = (l4 + udp_len).min(frame.len());
    let payload = &frame[l4 + 8..end];
    if inspect_ts(payload, rec) {
        return;
    }
    inspect_rtp(payload, rec);
}

fn inspect_rtp(p: &[u8], rec: &mut Record) {
    let Some(rtp) = RtpHeader::parse(p) else {
        return;
    };
    // Second bytes 192..=223 are RTCP when RTP and RTCP share a port (RFC 5761 4): SR,
    // RR, SDES, BYE, APP (200-204) and the feedback WebRTC sends (RTPFB 205 with
    // transport-cc and NACK, PSFB 206 with PLI and REMB, XR 207): payload types 64..=95.
    if (64..=95).contains(&rtp.payload_type) {
        return;
    }
    rec.flags |= crate::log::FLAG_RTP;
    if rtp.marker {
        rec.flags |= crate::log::FLAG_RTP_MARKER;
    }
    rec.rtp_pt = rtp.payload_type;
    rec.rtp_seq = rtp.seq;
    rec.rtp_ts = rtp.timestamp;
    rec.rtp_ssrc = rtp.ssrc;
    rec.rtp_header_words = rtp_header_words(p);
}

/// The RTP header's length in 32-bit words: 12 bytes, 4 per CSRC, and with the X bit
/// the extension's 4-byte header and its length words (RFC 3550 5.3.1); 0 when that
/// runs past the packet or past 255 words.
fn rtp_header_words(p: &[u8]) -> u8 {
    let mut len = 12 + 4 * usize::from(p[0] & 0x0f);
    if p[0] & 0x10 != 0 {
        if p.len() < len + 4 {
            return 0;
        }
        len += 4 + 4 * usize::from(be16(p, len + 2));
    }
    if len > p.len() {
        return 0;
    }
    u8::try_from(len / 4).unwrap_or(0)
}

const TS_PACKET: usize = 188;
const SRT_HEADER: usize = 16;

/// Whether `p` is whole MPEG-TS packets: a non-zero multiple of 188 bytes, each with 0x47.
fn is_ts(p: &[u8]) -> bool {
    !p.is_empty()
        && p.len().is_multiple_of(TS_PACKET)
        && p.iter().step_by(TS_PACKET).all(|&b| b == 0x47)
}

/// A UDP payload that is plain MPEG-TS or an SRT data packet (bit 31 of the first word
/// clear, a non-zero destination socket id, KK not 11b, which only control packets use):
/// set the payload flags and put the TS facts in the RTP fields (`rtp_seq` = low 16 bits
/// of the SRT sequence number, `rtp_ssrc` = PID, `rtp_ts`/`rtp_pt` = PTS bits 0..31/32).
/// Such a packet is never RTP. False when the payload is neither.
fn inspect_ts(p: &[u8], rec: &mut Record) -> bool {
    use crate::log::{PAYLOAD_SRT_DATA, PAYLOAD_SRT_ENCRYPTED, PAYLOAD_SRT_REXMIT, PAYLOAD_TS};
    if is_ts(p) {
        rec.payload_flags |= PAYLOAD_TS;
        ts_facts(p, rec);
        return true;
    }
    if p.len() < SRT_HEADER || p[0] & 0x80 != 0 || be32(p, 12) == 0 {
        return false;
    }
    let msgno = be32(p, 4);
    let kk = (msgno >> 27) & 3;
    if kk == 3 {
        return false;
    }
    rec.payload_flags |= PAYLOAD_SRT_DATA;
    rec.rtp_seq = (be32(p, 0) & 0xffff) as u16;
    if msgno & (1 << 26) != 0 {
        rec.payload_flags |= PAYLOAD_SRT_REXMIT;
    }
    if kk != 0 {
        rec.payload_flags |= PAYLOAD_SRT_ENCRYPTED;
    } else if is_ts(&p[SRT_HEADER..]) {
        rec.payload_flags |= PAYLOAD_TS;
        ts_facts(&p[SRT_HEADER..], rec);
    }
    true
}

/// PID and PTS of the first TS packet that starts a PES with a PTS (else the first
/// packet's PID); `ts` is whole TS packets.
fn ts_facts(ts: &[u8], rec: &mut Record) {
    rec.rtp_ssrc = u32::from(pid(ts));
    for packet in ts.chunks_exact(TS_PACKET) {
        if let Some(pts) = pes_pts(packet) {
            rec.payload_flags |= crate::log::PAYLOAD_PES_START;
            rec.rtp_ssrc = u32::from(pid(packet));
            rec.rtp_ts = pts as u32;
            rec.rtp_pt = (pts >> 32) as u8;
            return;
        }
    }
}

fn pid(packet: &[u8]) -> u16 {
    be16(packet, 1) & 0x1fff
}

/// The PTS of the PES that this 188-byte TS packet starts, if it starts one with a PTS.
fn pes_pts(packet: &[u8]) -> Option<u64> {
    let unit_start = packet[1] & 0x40 != 0;
    let control = (packet[3] >> 4) & 3;
    if !unit_start || control & 1 == 0 {
        return None;
    }
    let start = if control & 2 != 0 {
        5 + usize::from(packet[4])
    } else {
        4
    };
    let pes = packet.get(start..)?;
    // Start code, a stream id with the optional header ('10' marker bits), PTS flag.
    if pes.len() < 14 || pes[..3] != [0, 0, 1] || !has_pes_header(pes[3]) {
        return None;
    }
    if pes[6] & 0xc0 != 0x80 || pes[7] & 0x80 == 0 {
        return None;
    }
    let b = &pes[9..14];
    Some(
        (u64::from(b[0] >> 1) & 7) << 30
            | u64::from(b[1]) << 22
            | u64::from(b[2] >> 1) << 15
            | u64::from(b[3]) << 7
            | u64::from(b[4] >> 1),
    )
}

/// Stream ids whose PES packets carry the optional header (ISO 13818-1 2.4.3.7).
fn has_pes_header(stream_id: u8) -> bool {
    !matches!(
        stream_id,
        0xbc | 0xbe | 0xbf | 0xf0 | 0xf1 | 0xf2 | 0xf8 | 0xff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{
        FLAG_RTP, FLAG_RTP_MARKER, PAYLOAD_PES_START, PAYLOAD_SRT_DATA, PAYLOAD_SRT_ENCRYPTED,
        PAYLOAD_SRT_REXMIT, PAYLOAD_TS,
    };

    /// Ethernet + IPv4 + UDP (40000 -> 5004) around `payload`, padded to 60 bytes.
    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 77, 0, 1]);
        f[30..34].copy_from_slice(&[10, 77, 0, 2]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5004u16.to_be_bytes());
        f[38..40].copy_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(payload);
        f.resize(f.len().max(60), 0);
        f
    }

    /// A 188-byte TS packet of `pid`; with `pts`, it starts a video PES with that PTS
    /// (after an adaptation field of `adaptation` bytes when non-zero).
    fn ts_packet(pid: u16, pts: Option<u64>, adaptation: u8) -> [u8; 188] {
        let mut p = [0xffu8; 188];
        p[0] = 0x47;
        p[1..3].copy_from_slice(&(pid & 0x1fff).to_be_bytes());
        p[3] = if adaptation > 0 { 0x30 } else { 0x10 };
        let mut at = 4;
        if adaptation > 0 {
            p[4] = adaptation;
            p[5] = 0x10; // PCR flag; the rest stays stuffing
            at = 5 + usize::from(adaptation);
        }
        if let Some(pts) = pts {
            p[1] |= 0x40;
            let header = [0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5];
            p[at..at + 9].copy_from_slice(&header);
            p[at + 9] = 0x21 | (((pts >> 30) as u8 & 7) << 1);
            p[at + 10] = (pts >> 22) as u8;
            p[at + 11] = ((pts >> 14) as u8) | 1;
            p[at + 12] = (pts >> 7) as u8;
            p[at + 13] = ((pts << 1) as u8) | 1;
        }
        p
    }

    fn srt_header(seq: u32, kk: u32, rexmit: bool) -> Vec<u8> {
        let msgno = 3 << 30 | kk << 27 | u32::from(rexmit) << 26 | 77;
        let mut h = Vec::new();
        h.extend_from_slice(&(seq & 0x7fff_ffff).to_be_bytes());
        h.extend_from_slice(&msgno.to_be_bytes());
        h.extend_from_slice(&123_456u32.to_be_bytes());
        h.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        h
    }

    fn inspected(payload: &[u8]) -> Record {
        let mut rec = Record::default();
        inspect(&udp_frame(payload), &mut rec);
        rec
    }

    #[test]
    fn inspects_rtp_over_udp() {
        let mut rtp = vec![0x80, 0x80 | 96];
        rtp.extend_from_slice(&513u16.to_be_bytes());
        rtp.extend_from_slice(&48000u32.to_be_bytes());
        rtp.extend_from_slice(&0xdead_beefu32.to_be_bytes());
        rtp.extend_from_slice(&[0; 4]);
        let rec = inspected(&rtp);
        assert_eq!(rec.ip_proto, 17);
        assert_eq!(rec.src_ip, 0x0a4d_0001);
        assert_eq!((rec.src_port, rec.dst_port), (40000, 5004));
        assert_eq!(rec.flags & FLAG_RTP, FLAG_RTP);
        assert_ne!(rec.flags & FLAG_RTP_MARKER, 0);
        assert_eq!((rec.rtp_pt, rec.rtp_seq, rec.rtp_ts), (96, 513, 48000));
        assert_eq!(rec.rtp_ssrc, 0xdead_beef);
        assert_eq!(rec.payload_flags, 0);
        assert_eq!(rec.rtp_header_words, 3);
    }

    #[test]
    fn rtp_header_length_counts_csrcs_and_the_extension() {
        // Two CSRCs and a one-byte-header extension of two words (as WebRTC sends).
        let mut rtp = vec![0x92, 96, 0, 1, 0, 0, 0, 9, 0, 0, 0, 7];
        rtp.extend_from_slice(&[0; 8]);
        rtp.extend_from_slice(&[0xbe, 0xde, 0, 2]);
        rtp.extend_from_slice(&[0x10, 1, 0, 0, 0x22, 1, 2, 3]);
        rtp.extend_from_slice(&[0xaa; 100]);
        assert_eq!(inspected(&rtp).rtp_header_words, 3 + 2 + 1 + 2);
        // An extension that claims more than the packet holds.
        let mut cut = vec![0x90, 96, 0, 1, 0, 0, 0, 9, 0, 0, 0, 7, 0xbe, 0xde, 0, 40];
        cut.extend_from_slice(&[0; 8]);
        let rec = inspected(&cut);
        assert_eq!(rec.flags & FLAG_RTP, FLAG_RTP);
        assert_eq!(rec.rtp_header_words, 0);
    }

    #[test]
    fn srt_data_with_a_pes_start_gives_pid_and_33_bit_pts() {
        let pts = (1u64 << 32) | 0x0123_4567;
        let mut p = srt_header(0x1234_abcd, 0, false);
        p.extend_from_slice(&ts_packet(0x41, Some(pts), 7));
        let rec = inspected(&p);
        assert_eq!(
            rec.payload_flags,
            PAYLOAD_SRT_DATA | PAYLOAD_TS | PAYLOAD_PES_START
        );
        assert_eq!(rec.flags & FLAG_RTP, 0);
        assert_eq!((rec.rtp_ssrc, rec.rtp_seq), (0x41, 0xabcd));
        assert_eq!((rec.rtp_ts, rec.rtp_pt), (0x0123_4567, 1));
    }

    #[test]
    fn seven_ts_packets_take_the_first_pes_start() {
        let mut p = srt_header(9, 0, true);
        p.extend_from_slice(&ts_packet(0, None, 0)); // no PES start: PSI-like
        let mut pat = ts_packet(0x1000, None, 0);
        pat[1] |= 0x40; // unit start, but a section (no 00 00 01)
        pat[4] = 0;
        p.extend_from_slice(&pat);
        p.extend_from_slice(&ts_packet(0x42, Some(900), 0));
        p.extend_from_slice(&ts_packet(0x41, Some(3003), 0));
        for _ in 0..3 {
            p.extend_from_slice(&ts_packet(0x41, None, 0));
        }
        let rec = inspected(&p);
        let want = PAYLOAD_SRT_DATA | PAYLOAD_SRT_REXMIT | PAYLOAD_TS | PAYLOAD_PES_START;
        assert_eq!(rec.payload_flags, want);
        assert_eq!(
            (rec.rtp_ssrc, rec.rtp_ts, rec.rtp_pt, rec.rtp_seq),
            (0x42, 900, 0, 9)
        );
    }

    #[test]
    fn ts_without_pes_start_gives_the_first_pid() {
        let mut p = srt_header(5, 0, false);
        p.extend_from_slice(&ts_packet(0x41, None, 0));
        p.extend_from_slice(&ts_packet(0x44, None, 0));
        let rec = inspected(&p);
        assert_eq!(rec.payload_flags, PAYLOAD_SRT_DATA | PAYLOAD_TS);
        assert_eq!((rec.rtp_ssrc, rec.rtp_ts, rec.rtp_seq), (0x41, 0, 5));
    }

    #[test]
    fn plain_ts_over_udp() {
        let mut p = ts_packet(0x100, Some(90_000), 0).to_vec();
        p.extend_from_slice(&ts_packet(0x100, None, 0));
        let rec = inspected(&p);
        assert_eq!(rec.payload_flags, PAYLOAD_TS | PAYLOAD_PES_START);
        assert_eq!((rec.rtp_ssrc, rec.rtp_ts, rec.rtp_seq), (0x100, 90_000, 0));
    }

    #[test]
    fn encrypted_srt_is_not_parsed() {
        let mut p = srt_header(5, 1, false);
        p.extend_from_slice(&ts_packet(0x41, Some(1), 0));
        let rec = inspected(&p);
        assert_eq!(rec.payload_flags, PAYLOAD_SRT_DATA | PAYLOAD_SRT_ENCRYPTED);
        assert_eq!((rec.rtp_ssrc, rec.rtp_ts), (0, 0));
    }

    #[test]
    fn broken_ts_and_control_packets_are_not_ts() {
        let mut p = srt_header(5, 0, false);
        let mut bad = ts_packet(0x41, Some(1), 0);
        bad[0] = 0x48;
        p.extend_from_slice(&ts_packet(0x41, None, 0));
        p.extend_from_slice(&bad);
        assert_eq!(inspected(&p).payload_flags, PAYLOAD_SRT_DATA);
        let mut cut = srt_header(5, 0, false);
        cut.extend_from_slice(&ts_packet(0x41, Some(1), 0)[..100]);
        assert_eq!(inspected(&cut).payload_flags, PAYLOAD_SRT_DATA);
        let mut ack = srt_header(0, 0, false);
        ack[0] = 0x80; // control bit: an ACK-like packet
        ack[1] = 0x02;
        ack.extend_from_slice(&[0; 28]);
        assert_eq!(inspected(&ack).payload_flags, 0);
        // A short datagram in a padded frame is not an SRT header.
        assert_eq!(inspected(&[1, 2, 3, 4]).payload_flags, 0);
    }
}

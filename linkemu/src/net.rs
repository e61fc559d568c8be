//! AF_PACKET sockets bound to one interface, and what the log records of a frame.

use std::ffi::CString;
use std::mem::{size_of, zeroed};

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

impl PacketSocket {
    /// Open, bind to `iface`, enable promiscuous mode; `recv` times out after 100 ms.
    pub fn open(iface: &str) -> Result<PacketSocket, String> {
        let name = CString::new(iface).map_err(|_| format!("bad interface name '{iface}'"))?;
        // SAFETY: plain syscalls with valid arguments.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(os_error("no such interface", iface));
        }
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if fd < 0 {
            return Err(os_error("socket(AF_PACKET)", iface));
        }
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
/// addresses and ports (first fragments only), and RTP v2 header fields over UDP.
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
    let rtp = l4 + 8;
    if rec.ip_proto != libc::IPPROTO_UDP as u8 || frame.len() < rtp + 12 {
        return;
    }
    let pt = frame[rtp + 1] & 0x7f;
    // RTP version 2; payload types 72..=76 are RTCP (SR, RR, SDES, BYE, APP).
    if frame[rtp] >> 6 != 2 || (72..=76).contains(&pt) {
        return;
    }
    rec.flags |= crate::log::FLAG_RTP;
    if frame[rtp + 1] & 0x80 != 0 {
        rec.flags |= crate::log::FLAG_RTP_MARKER;
    }
    rec.rtp_pt = pt;
    rec.rtp_seq = be16(frame, rtp + 2);
    rec.rtp_ts = be32(frame, rtp + 4);
    rec.rtp_ssrc = be32(frame, rtp + 8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspects_rtp_over_udp() {
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 4];
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 77, 0, 1]);
        f[30..34].copy_from_slice(&[10, 77, 0, 2]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&5004u16.to_be_bytes());
        f[42] = 0x80;
        f[43] = 0x80 | 96;
        f[44..46].copy_from_slice(&513u16.to_be_bytes());
        f[46..50].copy_from_slice(&48000u32.to_be_bytes());
        f[50..54].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        let mut rec = Record::default();
        inspect(&f, &mut rec);
        assert_eq!(rec.ip_proto, 17);
        assert_eq!(rec.src_ip, 0x0a4d_0001);
        assert_eq!((rec.src_port, rec.dst_port), (40000, 5004));
        assert_eq!(rec.flags & crate::log::FLAG_RTP, crate::log::FLAG_RTP);
        assert_ne!(rec.flags & crate::log::FLAG_RTP_MARKER, 0);
        assert_eq!((rec.rtp_pt, rec.rtp_seq, rec.rtp_ts), (96, 513, 48000));
        assert_eq!(rec.rtp_ssrc, 0xdead_beef);
    }
}

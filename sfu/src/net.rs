//! The one UDP socket every peer shares, and its batched I/O.
//!
//! Receive: `recvmmsg` of up to `batch` datagrams per call into preallocated slots, each
//! with its source address and the kernel's receive time (`SO_TIMESTAMPNS`). Send:
//! datagrams collect in preallocated slots until the loop has nothing left to do, then
//! go out in one `sendmmsg`; with UDP GSO (`UDP_SEGMENT`, Linux 4.18+) consecutive
//! datagrams of one size to one destination leave as one message the kernel splits.
//! `--no-batch` uses `recvmsg`/`sendmsg` per datagram (and sends each at once), `--no-pool`
//! copies every datagram into a buffer allocated for it, as a design that queues owned
//! packets would. Nothing here allocates per packet otherwise.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;

use lltrace::Record;

/// Room for one datagram (Ethernet MTU and then some).
pub const SLOT: usize = 2048;
/// At most this many datagrams per GSO message (the kernel's UDP_MAX_SEGMENTS is 64).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65000;
const CONTROL_WORDS: usize = 16;

#[cfg(target_os = "linux")]
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;

fn os_err(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> bool {
    // SAFETY: `value` points to a T of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            mem::size_of::<T>() as libc::socklen_t,
        ) == 0
    }
}

pub fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr(sa: &libc::sockaddr_in) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

/// The UDP socket: non-blocking, bound to the one address given.
pub struct Socket {
    pub fd: RawFd,
    pub local: SocketAddrV4,
    /// The kernel stamps received datagrams (SO_TIMESTAMPNS).
    pub kernel_stamps: bool,
    /// The kernel segments UDP for us (UDP_SEGMENT).
    pub gso: bool,
    /// The kernel stamps sent datagrams (SO_TIMESTAMPING, software TX, on the error
    /// queue): only for the probes.
    pub tx_stamps: bool,
}

impl Socket {
    pub fn bind(addr: SocketAddrV4) -> Result<Socket, String> {
        // SAFETY: plain socket call; the fd is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(os_err("udp socket"));
        }
        let mut sock = Socket {
            fd,
            local: addr,
            kernel_stamps: false,
            gso: false,
            tx_stamps: false,
        };
        let size: libc::c_int = 4 << 20;
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if !setsockopt(fd, libc::SOL_SOCKET, force, &size) {
                setsockopt(fd, libc::SOL_SOCKET, plain, &size);
            }
        }
        let on: libc::c_int = 1;
        sock.kernel_stamps = setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &on);
        let sa = sockaddr(addr);
        // SAFETY: `sa` is a valid sockaddr_in.
        let rc = unsafe {
            libc::bind(
                fd,
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(os_err(&format!("bind udp {addr}")));
        }
        // GSO: the option exists (reading it) on kernels that segment UDP.
        let mut v: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid out-parameters.
        sock.gso = unsafe {
            libc::getsockopt(
                fd,
                SOL_UDP,
                UDP_SEGMENT,
                &mut v as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            ) == 0
        };
        Ok(sock)
    }
}

impl Socket {
    /// Asks the kernel for a software transmit timestamp of every datagram sent, with
    /// its per-socket sequence number (OPT_ID) and without the data (OPT_TSONLY), on the
    /// error queue; whether it agreed.
    pub fn enable_tx_stamps(&mut self) -> bool {
        let flags: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SOFTWARE
            | libc::SOF_TIMESTAMPING_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        self.tx_stamps = setsockopt(self.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags);
        self.tx_stamps
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: the fd is ours.
        unsafe { libc::close(self.fd) };
    }
}

/// Counts of what the socket layer did.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetCounts {
    pub recv_calls: u64,
    pub datagrams_in: u64,
    pub send_calls: u64,
    pub datagrams_out: u64,
    pub gso_messages: u64,
    pub send_dropped: u64,
}

/// One received datagram, valid until the next receive.
pub struct Datagram<'a> {
    pub data: &'a [u8],
    pub source: SocketAddr,
    /// The kernel's receive time (CLOCK_REALTIME ns), when stamped.
    pub kernel_realtime_ns: Option<u64>,
}

/// Preallocated receive slots for `recvmmsg`.
pub struct RecvBatch {
    cap: usize,
    batched: bool,
    pool: bool,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<[u64; CONTROL_WORDS]>,
    msgs: Vec<libc::mmsghdr>,
    /// `--no-pool`: each datagram's own allocation.
    owned: Vec<Vec<u8>>,
    pub len: usize,
}

impl RecvBatch {
    pub fn new(cap: usize, batched: bool, pool: bool) -> RecvBatch {
        let cap = if batched { cap.max(1) } else { 1 };
        let mut b = RecvBatch {
            cap,
            batched,
            pool,
            bufs: vec![0u8; cap * SLOT],
            // SAFETY: all-zero is a valid sockaddr_in, iovec, mmsghdr.
            addrs: vec![unsafe { mem::zeroed() }; cap],
            iovs: vec![unsafe { mem::zeroed() }; cap],
            ctrl: vec![[0u64; CONTROL_WORDS]; cap],
            msgs: vec![unsafe { mem::zeroed() }; cap],
            owned: Vec::with_capacity(cap),
            len: 0,
        };
        for i in 0..cap {
            b.iovs[i] = libc::iovec {
                iov_base: b.bufs[i * SLOT..].as_mut_ptr() as *mut libc::c_void,
                iov_len: SLOT,
            };
        }
        b
    }

    fn reset(&mut self, i: usize) {
        let h = &mut self.msgs[i].msg_hdr;
        h.msg_name = &mut self.addrs[i] as *mut libc::sockaddr_in as *mut libc::c_void;
        h.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &mut self.iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = mem::size_of::<[u64; CONTROL_WORDS]>() as _;
        h.msg_flags = 0;
        self.msgs[i].msg_len = 0;
    }

    /// Receives what is waiting (up to the batch), without blocking; the number of
    /// datagrams (0 when nothing waits).
    pub fn recv(&mut self, sock: &Socket, counts: &mut NetCounts) -> Result<usize, String> {
        self.len = 0;
        self.owned.clear();
        for i in 0..self.cap {
            self.reset(i);
        }
        counts.recv_calls += 1;
        let n = if self.batched {
            // SAFETY: every msghdr points to live slots of this batch.
            unsafe {
                libc::recvmmsg(
                    sock.fd,
                    self.msgs.as_mut_ptr(),
                    self.cap as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            }
        } else {
            // SAFETY: as above, one message.
            let n =
                unsafe { libc::recvmsg(sock.fd, &mut self.msgs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if n >= 0 {
                self.msgs[0].msg_len = n as libc::c_uint;
                1
            } else {
                -1
            }
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                // An ICMP error of an earlier send (a peer that went away): nothing lost here.
                Some(libc::ECONNREFUSED) | Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => {
                    Ok(0)
                }
                _ => Err(format!("recvmmsg: {err}")),
            };
        }
        self.len = n as usize;
        counts.datagrams_in += self.len as u64;
        if !self.pool {
            for i in 0..self.len {
                let len = (self.msgs[i].msg_len as usize).min(SLOT);
                self.owned
                    .push(self.bufs[i * SLOT..i * SLOT + len].to_vec());
            }
        }
        Ok(self.len)
    }

    /// The `i`-th datagram of the last receive.
    pub fn get(&self, i: usize) -> Datagram<'_> {
        let len = (self.msgs[i].msg_len as usize).min(SLOT);
        let data = if self.pool {
            &self.bufs[i * SLOT..i * SLOT + len]
        } else {
            &self.owned[i][..]
        };
        Datagram {
            data,
            source: from_sockaddr(&self.addrs[i]),
            kernel_realtime_ns: kernel_stamp(&self.msgs[i].msg_hdr),
        }
    }
}

/// The SCM_TIMESTAMPNS stamp among a received message's control messages.
fn kernel_stamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: walking the control buffer the kernel filled, with the CMSG macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                if ts.tv_sec > 0 {
                    return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

/// Outgoing datagrams waiting for one `sendmmsg`, in preallocated slots; beside each, the
/// probe record to complete when it has gone (`--trace`).
pub struct SendBatch {
    cap: usize,
    batched: bool,
    pool: bool,
    gso: bool,
    bufs: Vec<u8>,
    lens: Vec<usize>,
    dests: Vec<libc::sockaddr_in>,
    /// Probe records of the datagrams (kind `fwd`); `t_ns` is set once sent.
    pub records: Vec<Option<Record>>,
    /// `--no-pool`: each datagram's own allocation.
    owned: Vec<Vec<u8>>,
    order: Vec<usize>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<[u64; CONTROL_WORDS]>,
    msgs: Vec<libc::mmsghdr>,
    /// First slot of each message.
    msg_first: Vec<usize>,
    /// Per message: its transmit stamp (CLOCK_REALTIME ns), 0 until the kernel gives one.
    msg_stamp: Vec<u64>,
    /// Per message sent: its OPT_ID (the socket's count of datagrams sent before it).
    msg_id: Vec<u32>,
    /// Per message: when the call that sent it returned (CLOCK_MONOTONIC ns; 0: not sent).
    msg_return: Vec<u64>,
    /// The OPT_ID the next datagram sent will have.
    next_id: u32,
    errq: ErrQueue,
    pub len: usize,
}

/// Preallocated messages to read transmit stamps from the error queue.
struct ErrQueue {
    ctrl: Vec<[u64; CONTROL_WORDS]>,
    bufs: Vec<[u8; 64]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl ErrQueue {
    fn new(cap: usize) -> ErrQueue {
        ErrQueue {
            ctrl: vec![[0u64; CONTROL_WORDS]; cap],
            bufs: vec![[0u8; 64]; cap],
            // SAFETY: all-zero is a valid iovec and mmsghdr.
            iovs: vec![unsafe { mem::zeroed() }; cap],
            msgs: vec![unsafe { mem::zeroed() }; cap],
        }
    }

    /// Reads what waits on the error queue, handing `(OPT_ID, CLOCK_REALTIME ns)` of each
    /// software transmit stamp to `found`; the number of messages read.
    fn read(&mut self, fd: RawFd, mut found: impl FnMut(u32, u64)) -> usize {
        let cap = self.msgs.len();
        for i in 0..cap {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr() as *mut libc::c_void,
                iov_len: 64,
            };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = mem::size_of::<[u64; CONTROL_WORDS]>() as _;
            h.msg_flags = 0;
        }
        // SAFETY: every msghdr points to live buffers of this queue.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                cap as libc::c_uint,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            return 0;
        }
        for i in 0..n as usize {
            let (mut id, mut stamp) = (None, None);
            // SAFETY: walking the control buffer the kernel filled, with the CMSG macros.
            unsafe {
                let msg = &self.msgs[i].msg_hdr;
                let mut cmsg = libc::CMSG_FIRSTHDR(msg);
                while !cmsg.is_null() {
                    let c = &*cmsg;
                    if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPING {
                        let ts = std::ptr::read_unaligned(
                            libc::CMSG_DATA(cmsg) as *const libc::timespec
                        );
                        if ts.tv_sec > 0 {
                            stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                        }
                    } else if c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR {
                        let e = std::ptr::read_unaligned(
                            libc::CMSG_DATA(cmsg) as *const libc::sock_extended_err
                        );
                        if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
                            id = Some(e.ee_data);
                        }
                    }
                    cmsg = libc::CMSG_NXTHDR(msg, cmsg);
                }
            }
            if let (Some(id), Some(stamp)) = (id, stamp) {
                found(id, stamp);
            }
        }
        n as usize
    }
}

impl SendBatch {
    pub fn new(cap: usize, batched: bool, pool: bool, gso: bool) -> SendBatch {
        let cap = if batched { cap.max(1) } else { 1 };
        SendBatch {
            cap,
            batched,
            pool,
            gso,
            bufs: vec![0u8; cap * SLOT],
            lens: vec![0; cap],
            // SAFETY: all-zero is a valid sockaddr_in, iovec, mmsghdr.
            dests: vec![unsafe { mem::zeroed() }; cap],
            records: vec![None; cap],
            owned: Vec::with_capacity(cap),
            order: (0..cap).collect(),
            iovs: vec![unsafe { mem::zeroed() }; cap],
            ctrl: vec![[0u64; CONTROL_WORDS]; cap],
            msgs: vec![unsafe { mem::zeroed() }; cap],
            msg_first: vec![0; cap],
            msg_stamp: vec![0; cap],
            msg_id: vec![0; cap],
            msg_return: vec![0; cap],
            next_id: 0,
            errq: ErrQueue::new(cap),
            len: 0,
        }
    }

    /// Reads and forgets what waits on the error queue (stamps that came too late).
    pub fn discard_errors(&mut self, sock: &Socket) {
        while self.errq.read(sock.fd, |_, _| {}) == self.errq.msgs.len() {}
    }

    pub fn is_full(&self) -> bool {
        self.len == self.cap
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues a datagram (the caller flushes first when the batch is full); datagrams
    /// larger than a slot or not to IPv4 are dropped and counted.
    pub fn push(
        &mut self,
        dest: SocketAddr,
        data: &[u8],
        record: Option<Record>,
        counts: &mut NetCounts,
    ) {
        let SocketAddr::V4(dest) = dest else {
            counts.send_dropped += 1;
            return;
        };
        if data.len() > SLOT || self.len == self.cap {
            counts.send_dropped += 1;
            return;
        }
        let i = self.len;
        if self.pool {
            self.bufs[i * SLOT..i * SLOT + data.len()].copy_from_slice(data);
        } else {
            self.owned.push(data.to_vec());
        }
        self.lens[i] = data.len();
        self.dests[i] = sockaddr(dest);
        self.records[i] = record;
        self.len += 1;
    }

    fn slot_ptr(&mut self, i: usize) -> *mut libc::c_void {
        if self.pool {
            self.bufs[i * SLOT..].as_mut_ptr() as *mut libc::c_void
        } else {
            self.owned[i].as_mut_ptr() as *mut libc::c_void
        }
    }

    /// Sends every queued datagram; `sent(record, t_ns, kernel_tx)` is called for each
    /// datagram once the call that sent it returned (its record then completes), with the
    /// kernel's transmit stamp when the socket gives them (CLOCK_REALTIME ns). Datagrams the kernel
    /// refuses (a full socket buffer) are dropped and counted: the loop never blocks.
    pub fn flush(
        &mut self,
        sock: &Socket,
        counts: &mut NetCounts,
        mut sent: impl FnMut(Option<Record>, u64, Option<u64>),
    ) {
        if self.len == 0 {
            return;
        }
        let use_gso = self.gso && sock.gso && self.batched;
        // Group datagrams by destination, keeping each destination's order.
        let n = self.len;
        for i in 0..n {
            self.order[i] = i;
        }
        if use_gso {
            let dests = &self.dests;
            let key = |i: usize| (dests[i].sin_addr.s_addr, dests[i].sin_port);
            // Insertion sort: stable, allocation-free, n is small.
            for i in 1..n {
                let mut j = i;
                while j > 0 && key(self.order[j - 1]) > key(self.order[j]) {
                    self.order.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        let mut m = 0;
        let mut k = 0;
        while k < n {
            let first = self.order[k];
            let seg = self.lens[first];
            let mut count = 1;
            let mut bytes = seg;
            if use_gso {
                // Extend while the next datagram goes to the same place with the same
                // size (the last of a run may be shorter).
                while k + count < n && count < GSO_MAX_SEGMENTS {
                    let next = self.order[k + count];
                    let same_dest = self.dests[next].sin_addr.s_addr
                        == self.dests[first].sin_addr.s_addr
                        && self.dests[next].sin_port == self.dests[first].sin_port;
                    let len = self.lens[next];
                    let prev_len = self.lens[self.order[k + count - 1]];
                    if !same_dest || len > seg || prev_len != seg || bytes + len > GSO_MAX_BYTES {
                        break;
                    }
                    count += 1;
                    bytes += len;
                }
            }
            for c in 0..count {
                let slot = self.order[k + c];
                let base = self.slot_ptr(slot);
                self.iovs[k + c] = libc::iovec {
                    iov_base: base,
                    iov_len: self.lens[slot],
                };
            }
            let dest: *mut libc::sockaddr_in = &mut self.dests[first];
            let h = &mut self.msgs[m].msg_hdr;
            h.msg_name = dest as *mut libc::c_void;
            h.msg_namelen = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[k];
            h.msg_iovlen = count as _;
            h.msg_flags = 0;
            if count > 1 {
                // SAFETY: the control buffer holds one cmsg with a u16.
                unsafe {
                    h.msg_control = self.ctrl[m].as_mut_ptr() as *mut libc::c_void;
                    h.msg_controllen = libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as _;
                    let cmsg = libc::CMSG_FIRSTHDR(h);
                    (*cmsg).cmsg_level = SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, seg as u16);
                }
                counts.gso_messages += 1;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            self.msg_first[m] = k;
            m += 1;
            k += count;
        }
        // Send the messages, in as many calls as the kernel needs.
        let end_of = |firsts: &[usize], msg: usize| if msg + 1 < m { firsts[msg + 1] } else { n };
        let mut done = 0;
        while done < m {
            counts.send_calls += 1;
            let rc = if self.batched {
                // SAFETY: msgs[done..m] point to live slots, addresses and controls.
                unsafe {
                    libc::sendmmsg(
                        sock.fd,
                        self.msgs[done..].as_mut_ptr(),
                        (m - done) as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                }
            } else {
                // SAFETY: as above, one message.
                let r =
                    unsafe { libc::sendmsg(sock.fd, &self.msgs[done].msg_hdr, libc::MSG_DONTWAIT) };
                if r >= 0 {
                    1
                } else {
                    -1
                }
            };
            let t_ns = lltrace::clock::monotonic_ns();
            if rc <= 0 {
                // EAGAIN (buffer full) or an error for the first message (e.g. a
                // destination gone): drop it, go on with the rest.
                let datagrams = end_of(&self.msg_first, done) - self.msg_first[done];
                counts.send_dropped += datagrams as u64;
                self.msg_return[done] = 0; // not sent: no records
                done += 1;
                continue;
            }
            for msg in done..done + rc as usize {
                // The kernel counts send calls' messages (a GSO message is one).
                let datagrams = end_of(&self.msg_first, msg) - self.msg_first[msg];
                self.msg_id[msg] = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                self.msg_stamp[msg] = 0;
                self.msg_return[msg] = t_ns;
                counts.datagrams_out += datagrams as u64;
            }
            done += rc as usize;
        }
        // The transmit stamps of what was sent (a veth's, a NIC driver's: there by now).
        if sock.tx_stamps {
            let (ids, stamps, returns) = (&self.msg_id, &mut self.msg_stamp, &self.msg_return);
            loop {
                let got = self.errq.read(sock.fd, |id, stamp| {
                    if let Some(msg) = (0..m).find(|&k| returns[k] != 0 && ids[k] == id) {
                        stamps[msg] = stamp;
                    }
                });
                if got < self.errq.msgs.len() {
                    break;
                }
            }
        }
        for msg in 0..m {
            if self.msg_return[msg] == 0 {
                continue;
            }
            let stamp = (self.msg_stamp[msg] != 0).then_some(self.msg_stamp[msg]);
            for pos in self.msg_first[msg]..end_of(&self.msg_first, msg) {
                sent(self.records[self.order[pos]], self.msg_return[msg], stamp);
            }
        }
        self.len = 0;
        self.owned.clear();
        for r in &mut self.records[..n] {
            *r = None;
        }
    }
}

/// A counter the signalling thread writes to wake the loop (eventfd).
pub struct Waker {
    pub fd: RawFd,
}

impl Waker {
    pub fn new() -> Result<Waker, String> {
        // SAFETY: plain syscall; the fd is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("eventfd"));
        }
        Ok(Waker { fd })
    }

    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        unsafe { libc::write(self.fd, &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Clears the counter.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64.
        unsafe { libc::read(self.fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: the fd is ours.
        unsafe { libc::close(self.fd) };
    }
}

/// What woke the loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub socket: bool,
    pub waker: bool,
    /// The socket's error queue holds something (a late transmit stamp, an ICMP error).
    pub error: bool,
}

/// Blocks until the socket has data, the waker was woken, a signal arrived or
/// `timeout_ns` passed (`None`: no deadline). One `ppoll` call.
pub fn wait(sock: &Socket, waker: &Waker, timeout_ns: Option<u64>) -> Ready {
    let mut fds = [
        libc::pollfd {
            fd: sock.fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker.fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = timeout_ns.map(lltrace::clock::timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds and the timespec are valid for the call.
    let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, tsp, std::ptr::null()) };
    if rc <= 0 {
        return Ready::default();
    }
    Ready {
        socket: fds[0].revents & libc::POLLIN != 0,
        error: fds[0].revents & libc::POLLERR != 0,
        waker: fds[1].revents != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback_pair() -> (Socket, std::net::UdpSocket) {
        let sock = Socket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        (sock, peer)
    }

    fn local_port(fd: RawFd) -> u16 {
        // SAFETY: valid out-parameters.
        unsafe {
            let mut sa: libc::sockaddr_in = mem::zeroed();
            let mut len = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            libc::getsockname(fd, &mut sa as *mut _ as *mut libc::sockaddr, &mut len);
            u16::from_be(sa.sin_port)
        }
    }

    fn roundtrip(batched: bool, pool: bool, gso: bool) {
        let (sock, peer) = loopback_pair();
        let port = local_port(sock.fd);
        let sizes = [100usize, 1200, 1200, 1200, 700, 50];
        for (i, &n) in sizes.iter().enumerate() {
            peer.send_to(&vec![i as u8; n], ("127.0.0.1", port))
                .unwrap();
        }
        let mut rb = RecvBatch::new(4, batched, pool);
        let mut counts = NetCounts::default();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < sizes.len() && std::time::Instant::now() < deadline {
            let n = rb.recv(&sock, &mut counts).unwrap();
            for i in 0..n {
                let d = rb.get(i);
                assert_eq!(d.source, peer.local_addr().unwrap());
                if sock.kernel_stamps {
                    assert!(d.kernel_realtime_ns.is_some());
                }
                got.push(d.data.to_vec());
            }
        }
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), sizes);
        // Send them all back in one flush.
        let mut sb = SendBatch::new(8, batched, pool, gso);
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let dest = peer.local_addr().unwrap();
        let mut sent = 0;
        for d in &got {
            if sb.is_full() {
                sb.flush(&sock, &mut counts, |_, _, _| sent += 1);
            }
            sb.push(dest, d, None, &mut counts);
        }
        sb.flush(&sock, &mut counts, |_, _, _| sent += 1);
        assert_eq!(sent, sizes.len());
        let mut buf = [0u8; 4096];
        for (i, &n) in sizes.iter().enumerate() {
            let (len, _) = peer.recv_from(&mut buf).unwrap();
            assert_eq!(len, n, "datagram {i}");
            assert!(buf[..len].iter().all(|&b| b == i as u8));
        }
        assert_eq!(counts.datagrams_out, sizes.len() as u64);
        if gso && batched && sock.gso {
            assert!(
                counts.gso_messages >= 1,
                "three 1200-byte datagrams, one message"
            );
        }
    }

    #[test]
    fn batched_pooled_gso_roundtrip() {
        roundtrip(true, true, true);
    }

    #[test]
    fn unbatched_unpooled_roundtrip() {
        roundtrip(false, false, false);
        roundtrip(true, false, false);
    }

    #[test]
    fn wait_times_out_and_wakes() {
        let (sock, _peer) = loopback_pair();
        let waker = Waker::new().unwrap();
        assert_eq!(wait(&sock, &waker, Some(1_000_000)), Ready::default());
        waker.wake();
        assert!(wait(&sock, &waker, Some(1_000_000_000)).waker);
        waker.clear();
        assert!(!wait(&sock, &waker, Some(0)).waker);
    }
}

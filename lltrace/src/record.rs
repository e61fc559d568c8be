//! The 80-byte event record of an `EVENTS` chunk.

/// Size of an encoded record in bytes.
pub const RECORD_SIZE: usize = 80;

/// The "none" value of the u64 buffer fields.
pub const NONE: u64 = u64::MAX;

/// Record kinds (byte 75).
pub mod kind {
    /// A buffer is pushed on a pad.
    pub const PUSH: u8 = 0;
    /// The push into a sink returned.
    pub const DONE: u8 = 1;
    /// An EOS event is pushed on the pad.
    pub const EOS: u8 = 2;
    /// A PES starts in the buffer of the preceding `push` (MPEG-TS).
    pub const PES: u8 = 3;
    /// An SFU forwarded a packet on one subscriber leg (`docs/trace-format.md`, kind 4).
    pub const FWD: u8 = 4;
}

/// Event flag bits (byte 76).
pub mod flags {
    /// The RTP fields are valid.
    pub const RTP: u8 = 1;
    /// The RTP marker bit is set.
    pub const MARKER: u8 = 2;
    /// The buffer was part of a buffer list.
    pub const IN_LIST: u8 = 4;
    /// `pes` records: the TS packet's random_access_indicator is set.
    pub const RANDOM_ACCESS: u8 = 8;
}

/// The fields of a fixed RTP header that a record carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtpHeader {
    pub ssrc: u32,
    pub timestamp: u32,
    pub seq: u16,
    /// 7 bits.
    pub payload_type: u8,
    pub marker: bool,
}

impl RtpHeader {
    /// The header of `packet` if it is at least 12 bytes with version bits 2.
    #[inline]
    pub fn parse(packet: &[u8]) -> Option<RtpHeader> {
        if packet.len() < 12 || packet[0] >> 6 != 2 {
            return None;
        }
        Some(RtpHeader {
            ssrc: u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]),
            timestamp: u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]),
            seq: u16::from_be_bytes([packet[2], packet[3]]),
            payload_type: packet[1] & 0x7f,
            marker: packet[1] & 0x80 != 0,
        })
    }
}

/// The source packet of a forwarded one (a `fwd` record), as the SFU received it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwdSource {
    /// When the receive call that delivered it returned (CLOCK_MONOTONIC ns).
    pub recv_ns: u64,
    /// The kernel's receive time (CLOCK_MONOTONIC ns), [`NONE`] if not stamped.
    pub kernel_ns: u64,
    pub ssrc: u32,
    pub timestamp: u32,
    pub seq: u16,
}

/// One event, as stored in the per-thread rings and written to the file.
///
/// A `pes` record reuses the buffer fields (`docs/trace-format.md`, kind 3): `pts`/`dts`
/// are the PES's 90 kHz values, `offset`/`offset_end` the previous PES's `t_ns` and
/// elementary-stream bytes, `size` the TS packet's offset in the buffer, `rtp_ssrc` the
/// PID, `rtp_ts` the `PES_packet_length` and `rtp_pt` the stream_id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub t_ns: u64,
    pub pts: u64,
    pub dts: u64,
    pub duration: u64,
    pub offset: u64,
    pub offset_end: u64,
    pub pad_id: u32,
    pub thread_idx: u32,
    pub size: u32,
    pub buffer_flags: u32,
    pub rtp_ssrc: u32,
    pub rtp_ts: u32,
    pub rtp_seq: u16,
    pub rtp_pt: u8,
    pub kind: u8,
    pub flags: u8,
    pub list_index: u16,
}

impl Record {
    /// A record without buffer fields (all none/0), e.g. for `eos`.
    pub fn empty(t_ns: u64, pad_id: u32, thread_idx: u32, kind: u8) -> Self {
        Record {
            t_ns,
            pts: NONE,
            dts: NONE,
            duration: NONE,
            offset: NONE,
            offset_end: NONE,
            pad_id,
            thread_idx,
            kind,
            ..Record::default()
        }
    }

    /// A `fwd` record: the packet `out` (its header as sent) left on the leg of `pad_id`
    /// when the send call returned at `t_ns`, `size` bytes; it came from `src`.
    /// The source's keys and times sit in fields a `fwd` record does not otherwise use:
    /// `offset` the kernel's receive time, `offset_end` the receive call's return, `dts`
    /// its SSRC (low 32 bits) and RTP timestamp (high 32 bits), `list_index` its
    /// sequence number; `duration` is left for the kernel's transmit time of the packet
    /// ([`NONE`] until the caller sets it).
    #[inline]
    pub fn fwd(
        t_ns: u64,
        pad_id: u32,
        thread_idx: u32,
        size: u32,
        out: &RtpHeader,
        src: &FwdSource,
    ) -> Self {
        let mut r = Record::empty(t_ns, pad_id, thread_idx, kind::FWD);
        r.size = size;
        r.offset = src.kernel_ns;
        r.offset_end = src.recv_ns;
        r.dts = u64::from(src.ssrc) | (u64::from(src.timestamp) << 32);
        r.list_index = src.seq;
        r.set_rtp(out);
        r
    }

    /// The source of a `fwd` record (see [`Record::fwd`]).
    pub fn fwd_source(&self) -> FwdSource {
        FwdSource {
            recv_ns: self.offset_end,
            kernel_ns: self.offset,
            ssrc: self.dts as u32,
            timestamp: (self.dts >> 32) as u32,
            seq: self.list_index,
        }
    }

    /// Fills the RTP fields and sets [`flags::RTP`] (and [`flags::MARKER`]).
    #[inline]
    pub fn set_rtp(&mut self, h: &RtpHeader) {
        self.rtp_ssrc = h.ssrc;
        self.rtp_ts = h.timestamp;
        self.rtp_seq = h.seq;
        self.rtp_pt = h.payload_type;
        self.flags |= flags::RTP;
        if h.marker {
            self.flags |= flags::MARKER;
        }
    }

    /// Fills the RTP fields from a 12-byte fixed RTP header.
    ///
    /// Does nothing and returns `false` unless the version bits are 2.
    #[inline]
    pub fn set_rtp_header(&mut self, hdr: &[u8; 12]) -> bool {
        match RtpHeader::parse(hdr) {
            Some(h) => {
                self.set_rtp(&h);
                true
            }
            None => false,
        }
    }

    /// Encodes the record little-endian into `out` (the file layout).
    #[inline]
    pub fn encode(&self, out: &mut [u8; RECORD_SIZE]) {
        out[0..8].copy_from_slice(&self.t_ns.to_le_bytes());
        out[8..16].copy_from_slice(&self.pts.to_le_bytes());
        out[16..24].copy_from_slice(&self.dts.to_le_bytes());
        out[24..32].copy_from_slice(&self.duration.to_le_bytes());
        out[32..40].copy_from_slice(&self.offset.to_le_bytes());
        out[40..48].copy_from_slice(&self.offset_end.to_le_bytes());
        out[48..52].copy_from_slice(&self.pad_id.to_le_bytes());
        out[52..56].copy_from_slice(&self.thread_idx.to_le_bytes());
        out[56..60].copy_from_slice(&self.size.to_le_bytes());
        out[60..64].copy_from_slice(&self.buffer_flags.to_le_bytes());
        out[64..68].copy_from_slice(&self.rtp_ssrc.to_le_bytes());
        out[68..72].copy_from_slice(&self.rtp_ts.to_le_bytes());
        out[72..74].copy_from_slice(&self.rtp_seq.to_le_bytes());
        out[74] = self.rtp_pt;
        out[75] = self.kind;
        out[76] = self.flags;
        out[77] = 0;
        out[78..80].copy_from_slice(&self.list_index.to_le_bytes());
    }

    /// The encoded record.
    #[inline]
    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        self.encode(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{hex, record_fixtures};

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([b[o], b[o + 1]])
    }

    /// Every field read back by hand at its documented offset.
    fn decoded_by_hand(b: &[u8; RECORD_SIZE]) -> Record {
        assert_eq!(b[77], 0, "reserved byte");
        Record {
            t_ns: u64_at(b, 0),
            pts: u64_at(b, 8),
            dts: u64_at(b, 16),
            duration: u64_at(b, 24),
            offset: u64_at(b, 32),
            offset_end: u64_at(b, 40),
            pad_id: u32_at(b, 48),
            thread_idx: u32_at(b, 52),
            size: u32_at(b, 56),
            buffer_flags: u32_at(b, 60),
            rtp_ssrc: u32_at(b, 64),
            rtp_ts: u32_at(b, 68),
            rtp_seq: u16_at(b, 72),
            rtp_pt: b[74],
            kind: b[75],
            flags: b[76],
            list_index: u16_at(b, 78),
        }
    }

    #[test]
    fn every_kind_encodes_to_the_version_1_bytes_and_decodes_back() {
        let fixtures = record_fixtures();
        let kinds: Vec<u8> = fixtures.iter().map(|(_, r, _)| r.kind).collect();
        assert_eq!(
            kinds,
            [kind::PUSH, kind::DONE, kind::EOS, kind::PES, kind::FWD]
        );
        for (name, record, expected) in fixtures {
            let bytes = record.to_bytes();
            assert_eq!(hex(&bytes), expected, "{name}: bytes differ from version 1");
            assert_eq!(
                decoded_by_hand(&bytes),
                record,
                "{name}: fields do not round-trip"
            );
        }
    }

    #[test]
    fn encodes_every_field_at_its_offset() {
        let r = Record {
            t_ns: 0x0102030405060708,
            pts: 1,
            dts: NONE,
            duration: 3,
            offset: 4,
            offset_end: 5,
            pad_id: 6,
            thread_idx: 7,
            size: 8,
            buffer_flags: 9,
            rtp_ssrc: 10,
            rtp_ts: 11,
            rtp_seq: 12,
            rtp_pt: 13,
            kind: kind::DONE,
            flags: flags::RTP | flags::IN_LIST,
            list_index: 0x0203,
        };
        let mut b = [0xAAu8; RECORD_SIZE];
        r.encode(&mut b);
        assert_eq!(b[0], 0x08);
        assert_eq!(u64_at(&b, 0), 0x0102030405060708);
        assert_eq!(u64_at(&b, 16), NONE);
        assert_eq!(b[77], 0);
        assert_eq!(decoded_by_hand(&b), r);
    }

    #[test]
    fn parses_rtp_header() {
        // V=2, PT=96 with marker, seq 0x1234, ts 0xdeadbeef, ssrc 0x01020304
        let hdr = [
            0x80, 0xE0, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04,
        ];
        let mut r = Record::default();
        assert!(r.set_rtp_header(&hdr));
        assert_eq!(r.rtp_pt, 96);
        assert_eq!(r.rtp_seq, 0x1234);
        assert_eq!(r.rtp_ts, 0xdeadbeef);
        assert_eq!(r.rtp_ssrc, 0x01020304);
        assert_eq!(r.flags, flags::RTP | flags::MARKER);
        let mut packet = hdr.to_vec();
        packet.push(9);
        assert_eq!(RtpHeader::parse(&packet).map(|h| h.seq), Some(0x1234));
        assert_eq!(RtpHeader::parse(&packet[..11]), None);
    }

    #[test]
    fn rejects_non_rtp_version() {
        let mut r = Record::default();
        assert!(!r.set_rtp_header(&[0x40; 12]));
        assert_eq!(r, Record::default());
        assert_eq!(RtpHeader::parse(&[0u8; 12]), None);
    }

    #[test]
    fn fwd_record_keeps_its_source() {
        let out = RtpHeader {
            ssrc: 0xaabbccdd,
            timestamp: 90_000,
            seq: 17,
            payload_type: 96,
            marker: false,
        };
        let src = FwdSource {
            recv_ns: 1_000,
            kernel_ns: 900,
            ssrc: 0x11223344,
            timestamp: 0xfedcba98,
            seq: 0xfffe,
        };
        let r = Record::fwd(5_000, 3, 1, 1200, &out, &src);
        assert_eq!((r.kind, r.flags), (kind::FWD, flags::RTP));
        assert_eq!((r.rtp_ssrc, r.rtp_seq, r.rtp_ts), (0xaabbccdd, 17, 90_000));
        assert_eq!((r.pts, r.duration), (NONE, NONE));
        assert_eq!(r.fwd_source(), src);
        let none = FwdSource {
            kernel_ns: NONE,
            ..src
        };
        assert_eq!(Record::fwd(5_000, 3, 1, 1200, &out, &none).offset, NONE);
    }

    #[test]
    fn empty_record_has_none_fields() {
        let r = Record::empty(5, 2, 3, kind::EOS);
        assert_eq!((r.pts, r.dts, r.duration), (NONE, NONE, NONE));
        assert_eq!((r.offset, r.offset_end, r.size), (NONE, NONE, 0));
        assert_eq!((r.pad_id, r.thread_idx, r.kind), (2, 3, kind::EOS));
    }
}

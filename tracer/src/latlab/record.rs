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

/// One event, as stored in the per-thread rings and written to the file.
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

    /// Fills the RTP fields from a 12-byte fixed RTP header.
    ///
    /// Does nothing and returns `false` unless the version bits are 2.
    pub fn set_rtp_header(&mut self, hdr: &[u8; 12]) -> bool {
        if hdr[0] >> 6 != 2 {
            return false;
        }
        self.rtp_pt = hdr[1] & 0x7f;
        self.rtp_seq = u16::from_be_bytes([hdr[2], hdr[3]]);
        self.rtp_ts = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        self.rtp_ssrc = u32::from_be_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
        self.flags |= flags::RTP;
        if hdr[1] & 0x80 != 0 {
            self.flags |= flags::MARKER;
        }
        true
    }

    /// Encodes the record little-endian into `out` (the file layout).
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u64_at(0), 0x0102030405060708);
        assert_eq!(b[0], 0x08);
        assert_eq!(u64_at(8), 1);
        assert_eq!(u64_at(16), NONE);
        assert_eq!(u64_at(24), 3);
        assert_eq!(u64_at(32), 4);
        assert_eq!(u64_at(40), 5);
        assert_eq!(u32_at(48), 6);
        assert_eq!(u32_at(52), 7);
        assert_eq!(u32_at(56), 8);
        assert_eq!(u32_at(60), 9);
        assert_eq!(u32_at(64), 10);
        assert_eq!(u32_at(68), 11);
        assert_eq!(u16::from_le_bytes([b[72], b[73]]), 12);
        assert_eq!(b[74], 13);
        assert_eq!(b[75], 1);
        assert_eq!(b[76], 5);
        assert_eq!(b[77], 0);
        assert_eq!(u16::from_le_bytes([b[78], b[79]]), 0x0203);
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
    }

    #[test]
    fn rejects_non_rtp_version() {
        let mut r = Record::default();
        assert!(!r.set_rtp_header(&[0x40; 12]));
        assert_eq!(r, Record::default());
    }

    #[test]
    fn empty_record_has_none_fields() {
        let r = Record::empty(5, 2, 3, kind::EOS);
        assert_eq!((r.pts, r.dts, r.duration), (NONE, NONE, NONE));
        assert_eq!((r.offset, r.offset_end, r.size), (NONE, NONE, 0));
        assert_eq!((r.pad_id, r.thread_idx, r.kind), (2, 3, kind::EOS));
    }
}

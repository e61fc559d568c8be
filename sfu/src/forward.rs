//! What a subscriber leg does to each packet it forwards, free of I/O and of str0m's
//! state: the sequence number and timestamp rewrite (constant offsets within an epoch,
//! re-based when the leg switches source), the VP8 payload descriptor fields a switch
//! must keep continuous, key frame detection, and the choice of a simulcast layer from
//! a bandwidth estimate.

/// VP8 facts read from the start of an RTP payload (RFC 7741 section 4.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vp8Info {
    /// The first packet of a frame's first partition (S=1, PID=0).
    pub frame_start: bool,
    /// A key frame starts in this packet (only set with `frame_start`).
    pub keyframe: bool,
    /// The key frame's width and height (only set with `keyframe`).
    pub width: u16,
    pub height: u16,
    /// The 15-bit (or 7-bit) PictureID, if present.
    pub picture_id: Option<u16>,
    pub picture_id_15: bool,
    /// TL0PICIDX, if present.
    pub tl0_pic_idx: Option<u8>,
}

/// Parses a VP8 payload descriptor and, at a frame start, the payload header; `None` if
/// the payload is too short or malformed. Never panics, whatever the bytes.
pub fn vp8_info(payload: &[u8]) -> Option<Vp8Info> {
    let first = *payload.first()?;
    let mut info = Vp8Info {
        frame_start: first & 0x10 != 0 && first & 0x07 == 0,
        ..Vp8Info::default()
    };
    let mut at = 1;
    if first & 0x80 != 0 {
        let ext = *payload.get(at)?;
        at += 1;
        if ext & 0x80 != 0 {
            let b = *payload.get(at)?;
            at += 1;
            if b & 0x80 != 0 {
                let lo = *payload.get(at)?;
                at += 1;
                info.picture_id = Some((u16::from(b & 0x7f) << 8) | u16::from(lo));
                info.picture_id_15 = true;
            } else {
                info.picture_id = Some(u16::from(b));
            }
        }
        if ext & 0x40 != 0 {
            info.tl0_pic_idx = Some(*payload.get(at)?);
            at += 1;
        }
        if ext & 0x30 != 0 {
            payload.get(at)?;
            at += 1;
        }
    }
    if at >= payload.len() {
        return None;
    }
    if info.frame_start {
        // Payload header: bit 0 of the first byte is 0 for a key frame (RFC 6386 9.1),
        // then 3 bytes of frame tag, the start code 9d 01 2a and 14-bit width, height.
        let header = &payload[at..];
        if header[0] & 0x01 == 0 {
            info.keyframe = true;
            if header.len() >= 10 && header[3..6] == [0x9d, 0x01, 0x2a] {
                info.width = u16::from_le_bytes([header[6], header[7]]) & 0x3fff;
                info.height = u16::from_le_bytes([header[8], header[9]]) & 0x3fff;
            }
        }
    }
    Some(info)
}

/// The numbering one subscriber leg gives one outgoing stream: extended sequence
/// numbers and RTP timestamps of the source plus offsets that are constant within an
/// epoch; a new epoch (a different source, a layer switch) re-bases them so that the
/// leg's numbering runs on without a gap.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rewrite {
    started: bool,
    /// Out = in + offset (extended, wrapping in u64 / u32).
    seq_offset: u64,
    ts_offset: u32,
    /// The first extended input sequence number of this epoch: older packets of the
    /// source belong to numbers the leg has already used for something else.
    epoch_first_in: u64,
    /// The highest extended sequence number sent so far, and its timestamp.
    last_out_seq: u64,
    last_out_ts: u32,
    /// Arrival (ns, any monotonic base) of the packet that set `last_out_ts`.
    last_arrival_ns: u64,
    clock_hz: u32,
}

impl Rewrite {
    /// A leg whose first packet will go out with sequence number `first_seq` (below 2^15,
    /// so the receiver's rollover counter starts at 0) on a clock of `clock_hz`.
    pub fn new(first_seq: u16, clock_hz: u32) -> Self {
        Rewrite {
            last_out_seq: u64::from((first_seq & 0x7fff).max(1)) - 1,
            clock_hz,
            ..Rewrite::default()
        }
    }

    /// Starts a new epoch at the source packet (`in_seq`, `in_ts`) arriving at
    /// `arrival_ns`: it will go out one sequence number after the last one sent, and
    /// its timestamp as far after the last as the arrival is (at least 1 tick).
    pub fn rebase(&mut self, in_seq: u64, in_ts: u32, arrival_ns: u64) {
        let next_seq = self.last_out_seq.wrapping_add(1);
        let next_ts = if self.started {
            let gap_ns = arrival_ns.saturating_sub(self.last_arrival_ns);
            let ticks = (u128::from(gap_ns) * u128::from(self.clock_hz) / 1_000_000_000)
                .clamp(1, u128::from(u32::MAX / 2)) as u32;
            self.last_out_ts.wrapping_add(ticks)
        } else {
            in_ts
        };
        self.seq_offset = next_seq.wrapping_sub(in_seq);
        self.ts_offset = next_ts.wrapping_sub(in_ts);
        self.epoch_first_in = in_seq;
        self.started = true;
    }

    /// The outgoing (extended sequence number, timestamp) of a source packet of the
    /// current epoch, or `None` for a packet older than the epoch (it would reuse a
    /// number the leg already gave to another source).
    pub fn map(&mut self, in_seq: u64, in_ts: u32, arrival_ns: u64) -> Option<(u64, u32)> {
        if !self.started {
            self.rebase(in_seq, in_ts, arrival_ns);
        }
        if in_seq < self.epoch_first_in {
            return None;
        }
        let out_seq = in_seq.wrapping_add(self.seq_offset);
        let out_ts = in_ts.wrapping_add(self.ts_offset);
        if out_seq > self.last_out_seq {
            self.last_out_seq = out_seq;
            self.last_out_ts = out_ts;
            self.last_arrival_ns = arrival_ns;
        }
        Some((out_seq, out_ts))
    }
}

/// Keeps a leg's VP8 PictureID and TL0PICIDX continuous across layer switches.
#[derive(Clone, Copy, Debug, Default)]
pub struct PictureIds {
    started: bool,
    pic_offset: u16,
    tl0_offset: u8,
    last_pic: u16,
    last_tl0: u8,
}

impl PictureIds {
    /// Re-bases at the first packet of a new epoch (a key frame of the new layer).
    pub fn rebase(&mut self, info: &Vp8Info) {
        if let Some(pic) = info.picture_id {
            let next = if self.started {
                self.last_pic.wrapping_add(1)
            } else {
                pic
            };
            self.pic_offset = next.wrapping_sub(pic);
        }
        if let Some(tl0) = info.tl0_pic_idx {
            let next = if self.started {
                self.last_tl0.wrapping_add(1)
            } else {
                tl0
            };
            self.tl0_offset = next.wrapping_sub(tl0);
        }
        self.started = true;
    }

    /// The outgoing (PictureID, TL0PICIDX) of a packet, `None` where nothing changes.
    pub fn map(&mut self, info: &Vp8Info) -> (Option<u16>, Option<u8>) {
        if !self.started {
            self.rebase(info);
        }
        let pic = info.picture_id.map(|p| {
            let mask = if info.picture_id_15 { 0x7fff } else { 0x7f };
            let out = p.wrapping_add(self.pic_offset) & mask;
            self.last_pic = out;
            out
        });
        let tl0 = info.tl0_pic_idx.map(|t| {
            let out = t.wrapping_add(self.tl0_offset);
            self.last_tl0 = out;
            out
        });
        let pic = pic.filter(|_| self.pic_offset != 0);
        let tl0 = tl0.filter(|_| self.tl0_offset != 0);
        (pic, tl0)
    }
}

/// A simulcast layer as the choice sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerRate {
    /// Whether the layer sends (a packet in the last second).
    pub active: bool,
    /// Its quality rank: width of its key frames, else 0.
    pub width: u16,
    /// What it sent over the last second, bits per second.
    pub bps: u64,
}

/// The headroom an estimate must leave above a layer's rate to choose it.
pub const HEADROOM: f64 = 1.15;
/// Audio's share of a leg, taken off the estimate first.
pub const AUDIO_BPS: u64 = 64_000;

/// The layer (index into `layers`) a leg with estimate `estimate_bps` should carry: the
/// best active one whose measured rate fits with [`HEADROOM`], else the lowest active
/// one; layers are ranked by width, then rate. A layer whose rate is not measured yet
/// fits nowhere. `None` when no layer is active.
pub fn choose_layer(layers: &[LayerRate], estimate_bps: u64) -> Option<usize> {
    let budget = estimate_bps.saturating_sub(AUDIO_BPS) as f64;
    let rank = |i: &usize| (layers[*i].width, layers[*i].bps);
    let active = (0..layers.len()).filter(|&i| layers[i].active);
    let lowest = active.clone().min_by_key(rank)?;
    let fitting = active
        .filter(|&i| layers[i].bps > 0 && layers[i].bps as f64 * HEADROOM <= budget)
        .max_by_key(rank);
    Some(fitting.unwrap_or(lowest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A VP8 key frame's first packet: X=1, I=1 (15-bit PictureID), L=1, T=1; then the
    /// payload header of a 1280x720 key frame.
    fn keyframe_packet(pic: u16, tl0: u8) -> Vec<u8> {
        let mut p = vec![0x90, 0xe0, 0x80 | (pic >> 8) as u8, pic as u8, tl0, 0x20];
        p.extend_from_slice(&[0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x00, 0x05, 0xd0, 0x02]);
        p.extend_from_slice(&[0u8; 20]);
        p
    }

    #[test]
    fn reads_a_key_frame_and_its_size() {
        let info = vp8_info(&keyframe_packet(0x1234, 7)).unwrap();
        assert!(info.frame_start && info.keyframe);
        assert_eq!((info.width, info.height), (1280, 720));
        assert_eq!(info.picture_id, Some(0x1234));
        assert!(info.picture_id_15);
        assert_eq!(info.tl0_pic_idx, Some(7));
        let mut delta = keyframe_packet(5, 1);
        delta[6] |= 1; // inter frame
        let info = vp8_info(&delta).unwrap();
        assert!(info.frame_start && !info.keyframe);
        let mut cont = keyframe_packet(5, 1);
        cont[0] = 0x80; // not a frame start
        assert!(!vp8_info(&cont).unwrap().keyframe);
        assert_eq!(vp8_info(&[]), None);
        assert_eq!(vp8_info(&[0x90, 0xe0]), None);
    }

    #[test]
    fn rewrite_is_constant_within_an_epoch_and_runs_on_across_a_switch() {
        let mut r = Rewrite::new(100, 90_000);
        assert_eq!(r.map(5000, 1_000_000, 0), Some((100, 1_000_000)));
        assert_eq!(r.map(5001, 1_003_000, 33_000_000), Some((101, 1_003_000)));
        assert_eq!(r.map(5003, 1_003_000, 34_000_000), Some((103, 1_003_000)));
        assert_eq!(r.map(5002, 1_003_000, 35_000_000), Some((102, 1_003_000)));
        // Another layer: numbering continues after 103, 33 ms later = 2970 ticks on.
        r.rebase(9000, 7, 67_000_000);
        assert_eq!(r.map(9000, 7, 67_000_000), Some((104, 1_003_000 + 2970)));
        assert_eq!(r.map(8999, 4, 67_000_000), None, "older than the epoch");
        assert_eq!(r.map(9001, 3007, 70_000_000), Some((105, 1_003_000 + 5970)));
    }

    #[test]
    fn picture_ids_continue_across_a_switch() {
        let mut p = PictureIds::default();
        let a = vp8_info(&keyframe_packet(100, 10)).unwrap();
        assert_eq!(
            p.map(&a),
            (None, None),
            "first epoch keeps the source's ids"
        );
        let b = vp8_info(&keyframe_packet(7000, 200)).unwrap();
        p.rebase(&b);
        assert_eq!(p.map(&b), (Some(101), Some(11)));
        let c = vp8_info(&keyframe_packet(7001, 200)).unwrap();
        assert_eq!(p.map(&c), (Some(102), Some(11)));
    }

    #[test]
    fn chooses_the_best_layer_that_fits() {
        let layers = [
            LayerRate {
                active: true,
                width: 1280,
                bps: 2_000_000,
            },
            LayerRate {
                active: true,
                width: 320,
                bps: 150_000,
            },
            LayerRate {
                active: true,
                width: 640,
                bps: 500_000,
            },
        ];
        assert_eq!(choose_layer(&layers, 10_000_000), Some(0));
        assert_eq!(choose_layer(&layers, 1_000_000), Some(2));
        assert_eq!(choose_layer(&layers, 300_000), Some(1));
        assert_eq!(
            choose_layer(&layers, 10_000),
            Some(1),
            "lowest when none fits"
        );
        let mut off = layers;
        off[0].active = false;
        assert_eq!(choose_layer(&off, 10_000_000), Some(2));
        assert_eq!(choose_layer(&[], 1), None);
        let mut unmeasured = layers;
        unmeasured[0].bps = 0;
        assert_eq!(
            choose_layer(&unmeasured, 10_000_000),
            Some(2),
            "not measured: no fit"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn vp8_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = vp8_info(&bytes);
        }

        /// Whatever the order packets of two sources arrive in, a leg never sends one
        /// sequence number twice and never goes back before an epoch's start.
        #[test]
        fn rewrite_never_reuses_a_number(
            steps in proptest::collection::vec((0u64..3, 0u64..40, any::<u32>()), 1..200)
        ) {
            let mut r = Rewrite::new(1, 90_000);
            let mut used = std::collections::HashMap::new();
            let mut source = 0u64;
            for (i, (src, seq, ts)) in steps.into_iter().enumerate() {
                let in_seq = src * 1_000_000 + seq;
                if src != source {
                    source = src;
                    r.rebase(in_seq, ts, i as u64 * 1000);
                }
                if src != source { continue; }
                if let Some((out, _)) = r.map(in_seq, ts, i as u64 * 1000) {
                    if let Some(prev) = used.insert(out, in_seq) {
                        prop_assert_eq!(prev, in_seq, "number {} reused", out);
                    }
                }
            }
        }
    }
}

//! Fixed test vectors: values of every record and chunk kind with the bytes that
//! version 1 of the format gives them (produced by the encoders the tracer and
//! latlab-kuprobe had before this crate), and a whole trace file for the Python reader.

use std::path::Path;

use crate::chunk::{self, ClockDesc, PadDesc, SegmentDesc};
use crate::record::{flags, kind, FwdSource, Record, RtpHeader, NONE};

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub const HEADER_HEX: &str = "4c4c545241434500010020005000000004030201000000008877665544332211";
pub const INFO_HEX: &str = "0100000019000000070070726f63657373060073656e64657204006bc3a9790000";
pub const PAD_HEX: &str = concat!(
    "0200000072000000070000003f00000008070605040302010a007274706c31367061793003007372",
    "6309007274704c31367061791b00436f6465632f5061796c6f616465722f4e6574776f726b2f5254",
    "50080075647073696e6b30040073696e6b070075647073696e6b0e00706970656c696e65302f6269",
    "6e31",
);
pub const THREAD_HEX: &str = "030000001900000003000000921000000f00617564696f74657374737263303a73";
pub const PUSH_HEX: &str = concat!(
    "08070605040302018096980000000000ffffffffffffffff8096980000000000e001000000000000",
    "c00300000000000002000000010000008c07000040400000ad07d456efbeaddefeff600003000000",
);
pub const DONE_HEX: &str = concat!(
    "0d070605040302018096980000000000ffffffffffffffff8096980000000000e001000000000000",
    "c00300000000000002000000010000008c07000040400000ad07d456efbeaddefeff600105000201",
);
pub const EOS_HEX: &str = concat!(
    "9900000000000000ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffffffffffff0200000001000000000000000000000000000000000000000000000200000000",
);
pub const PES_HEX: &str = concat!(
    "07000000000000000100000001000000ffffffffffffffffffffffffffffffff0500000000000000",
    "62010000000000000400000002000000780100000000000041000000000000000000e0030c000300",
);
pub const EVENTS_HEX: &str = concat!(
    "04000000a000000008070605040302018096980000000000ffffffffffffffff8096980000000000",
    "e001000000000000c00300000000000002000000010000008c07000040400000ad07d456efbeadde",
    "feff6000030000009900000000000000ffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffff020000000100000000000000000000000000000000000000",
    "0000000200000000",
);
pub const FWD_HEX: &str = concat!(
    "0b0a000000000000ffffffffffffffffad07d456efbeaddeffffffffffffffff0008000000000000",
    "000900000000000008000000020000004c0400000000000004030201b80b0000018060040300feff",
);
pub const CAPS_HEX: &str = concat!(
    "050000002a0000000200000089674523010000001c00617564696f2f782d7261772c20726174653d",
    "28696e74293438303030",
);
pub const CLOCK_HEX: &str = concat!(
    "06000000430000000100000000000000e803000000000000d007000000000000ffffffffffffffff",
    "04000000010000000900706970656c696e65300e0047737453797374656d436c6f636b",
);
pub const DROPS_HEX: &str = "070000001000000037000000000000004200000000000000";
pub const END_HEX: &str = "08000000180000004d0000000000000058000000000000006300000000000000";
pub const STATS_HEX: &str = concat!(
    "090000002d0000002a00000000000000090066616b6573696e6b30080066616b6573696e6b0e007b",
    "2272656e6465726564223a337d",
);
pub const SEGMENT_HEX: &str = concat!(
    "0a0000005c000000090000007b000000000000000300000000000000000000000000f03f00000000",
    "0000e0bf0000000000000000010000000000000000a0b83046030000ffffffffffffffff04000000",
    "000000000500000000000000ffffffffffffffff",
);
pub const LATENCY_HEX: &str = "0b00000014000000050000000600000000000000002d310100000000";

/// The `push`, `done`, `eos`, `pes` and `fwd` records of the vectors, with their bytes.
pub fn record_fixtures() -> Vec<(&'static str, Record, &'static str)> {
    let push = Record {
        t_ns: 0x0102030405060708,
        pts: 10_000_000,
        dts: NONE,
        duration: 10_000_000,
        offset: 480,
        offset_end: 960,
        pad_id: 2,
        thread_idx: 1,
        size: 1932,
        buffer_flags: 0x4040,
        rtp_ssrc: 0x56d407ad,
        rtp_ts: 0xdeadbeef,
        rtp_seq: 0xfffe,
        rtp_pt: 96,
        kind: kind::PUSH,
        flags: flags::RTP | flags::MARKER,
        list_index: 0,
    };
    let done = Record {
        t_ns: push.t_ns + 5,
        kind: kind::DONE,
        flags: flags::RTP | flags::IN_LIST,
        list_index: 0x0102,
        ..push
    };
    let eos = Record::empty(0x99, 2, 1, kind::EOS);
    let pes = Record {
        t_ns: 7,
        pts: 0x1_0000_0001,
        dts: NONE,
        duration: NONE,
        offset: 5,
        offset_end: 354,
        pad_id: 4,
        thread_idx: 2,
        size: 376,
        buffer_flags: 0,
        rtp_ssrc: 0x41,
        rtp_ts: 0,
        rtp_seq: 0,
        rtp_pt: 0xE0,
        kind: kind::PES,
        flags: flags::IN_LIST | flags::RANDOM_ACCESS,
        list_index: 3,
    };
    let out = RtpHeader {
        ssrc: 0x01020304,
        timestamp: 3000,
        seq: 0x8001,
        payload_type: 96,
        marker: true,
    };
    let src = FwdSource {
        recv_ns: 0x0900,
        kernel_ns: 0x0800,
        ssrc: 0x56d407ad,
        timestamp: 0xdeadbeef,
        seq: 0xfffe,
    };
    let fwd = Record::fwd(0x0a0b, 8, 2, 1100, &out, &src);
    vec![
        ("push", push, PUSH_HEX),
        ("done", done, DONE_HEX),
        ("eos", eos, EOS_HEX),
        ("pes", pes, PES_HEX),
        ("fwd", fwd, FWD_HEX),
    ]
}

/// The pad of [`PAD_HEX`]: every flag, every string set.
pub fn pad_desc() -> PadDesc {
    PadDesc {
        pad_id: 7,
        flags: 0x3f,
        pipeline_id: 0x0102030405060708,
        element: "rtpl16pay0".into(),
        pad: "src".into(),
        factory: "rtpL16pay".into(),
        klass: "Codec/Payloader/Network/RTP".into(),
        peer_element: "udpsink0".into(),
        peer_pad: "sink".into(),
        peer_factory: "udpsink".into(),
        parent_path: "pipeline0/bin1".into(),
    }
}

/// The clock of [`CLOCK_HEX`].
pub fn clock_desc() -> ClockDesc {
    ClockDesc {
        pipeline_id: 1,
        mono_ns: 1000,
        clock_ns: 2000,
        base_time: NONE,
        state: 4,
        flags: chunk::clock_flags::SYSTEM_MONOTONIC,
        pipeline: "pipeline0".into(),
        clock: "GstSystemClock".into(),
    }
}

/// The segment of [`SEGMENT_HEX`].
pub fn segment_desc() -> SegmentDesc {
    SegmentDesc {
        pad_id: 9,
        t_ns: 123,
        format: 3,
        flags: 0,
        rate: 1.0,
        applied_rate: -0.5,
        values: [0, 1, 3_600_000_000_000, NONE, 4, 5, NONE],
    }
}

/// A whole trace file with one chunk of every type and a record of every kind; its
/// values are spelled out again in `tests/test_trace_roundtrip.py`, which reads it with
/// the Python reader.
pub fn fixture_file() -> Vec<u8> {
    let mut out = chunk::header(4242, 1_000_000_000).to_vec();
    chunk::info(
        &mut out,
        &[
            ("process", "fixture"),
            ("hostname", "h\u{f4}te"),
            ("tracer_version", "lltrace fixture"),
        ],
    );
    chunk::thread(&mut out, 1, 100, "src:\u{e9}");
    chunk::thread(&mut out, 2, 101, "");
    chunk::pad(&mut out, &pad_desc());
    chunk::pad(
        &mut out,
        &PadDesc {
            pad_id: 8,
            ..PadDesc::default()
        },
    );
    chunk::caps(&mut out, 7, 0x123456789, "audio/x-raw, rate=(int)48000");
    chunk::clock(&mut out, &clock_desc());
    chunk::segment(&mut out, &segment_desc());
    chunk::latency(&mut out, 7, 6, 20_000_000);
    chunk::stats(
        &mut out,
        42,
        "fakesink0",
        "fakesink",
        "{\"rendered\":3,\"name\":\"x\"}",
    );
    let records: Vec<Record> = record_fixtures().into_iter().map(|(_, r, _)| r).collect();
    chunk::events(&mut out, &records);
    chunk::drops(&mut out, 55, 66);
    chunk::end(&mut out, 77, records.len() as u64, 66);
    out
}

/// Writes [`fixture_file`] to the path in `LLTRACE_FIXTURE`, for
/// `tests/test_trace_roundtrip.py` (which runs this test by name); without the
/// variable it only checks the file's framing.
#[test]
fn write_fixture_for_python() {
    let data = fixture_file();
    assert_eq!(hex(&data[..32]), hex(&chunk::header(4242, 1_000_000_000)));
    let mut at = 32;
    let mut types = Vec::new();
    while at < data.len() {
        let ty = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap()) as usize;
        types.push(ty);
        at += 8 + len;
    }
    assert_eq!(at, data.len());
    assert_eq!(types, [1, 3, 3, 2, 2, 5, 6, 10, 11, 9, 4, 7, 8]);
    if let Some(path) = std::env::var_os("LLTRACE_FIXTURE") {
        std::fs::write(Path::new(&path), &data).unwrap();
    }
}

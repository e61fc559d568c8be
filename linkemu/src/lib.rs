//! The link emulator's parts, shared by its programs: `latlab-linkemu` (a layer-2 link
//! between two interfaces), `latlab-capture` (every packet a host sends or receives,
//! with kernel timestamps) and `latlab-udpgen` (a steady RTP-like sender). They write
//! the same log format (`docs/link-log-format.md`).

pub mod args;
pub mod config;
pub mod lane;
pub mod log;
pub mod model;
pub mod net;
pub mod rt;

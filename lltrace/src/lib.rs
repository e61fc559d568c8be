//! The latlab trace format, `.lltrace` (`docs/trace-format.md`, version 1), and the
//! pieces of the recording hot paths that latlab's Rust programs share.
//!
//! * [`record`]: the 80-byte event record of an `EVENTS` chunk (every kind: `push`,
//!   `done`, `eos`, `pes`, `fwd`) and the RTP header fields it carries;
//! * [`chunk`]: the 32-byte file header (magic, version) and every chunk type;
//! * [`ring`]: the bounded lock-free single-producer single-consumer ring that a
//!   streaming (or receive) thread fills without locking, allocating or blocking;
//! * [`clock`]: CLOCK_MONOTONIC / CLOCK_REALTIME reads in nanoseconds.
//!
//! Users: the GStreamer tracer (`tracer/`), `latlab-kuprobe` (`kuprobe/`), `latlab-sfu`
//! (`sfu/`, its white-box probes) and, for the ring and the clock, `latlab-linkemu`
//! (`linkemu/`, whose link log is its own format).
//! The Python reader is `src/latlab/ingest/trace_reader.py`.

pub mod chunk;
pub mod clock;
pub mod record;
pub mod ring;

pub use record::{flags, kind, FwdSource, Record, RtpHeader, NONE, RECORD_SIZE};
pub use ring::Spsc;

#[cfg(test)]
mod fixture;

//! The `latlab` tracer: per-buffer push records written to a `.lltrace` file.
//!
//! Parameters (`GST_TRACERS="latlab(dir=/tmp/x,process=sender,ring=65536)"`):
//!
//! * `file`: output file (else env `LATLAB_TRACE_FILE`)
//! * `dir`: output directory (else env `LATLAB_TRACE_DIR`, else the current directory)
//! * `process`: process name (else env `LATLAB_PROCESS`, else the program name)
//! * `ring`: per-thread ring capacity in records (default 65536)
//! * `stats-interval-ms`: interval of the `STATS` chunks (else env
//!   `LATLAB_STATS_INTERVAL_MS`, else 100; 0 disables them)

use std::sync::LazyLock;

use gst::glib;
use gst::prelude::*;

mod guard;
mod imp;
mod pes;
mod recorder;
mod session;
mod settings;
mod signals;
mod stats;
mod writer;

/// The tracer's debug category: `GST_DEBUG=latlab:5` shows its messages.
pub static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "latlab",
        gst::DebugColorFlags::empty(),
        Some("latlab tracer"),
    )
});

glib::wrapper! {
    /// The latlab tracer object.
    pub struct LatlabTracer(ObjectSubclass<imp::LatlabTracer>)
        @extends gst::Tracer, gst::Object;
}

/// Registers the `latlab` tracer factory with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    LazyLock::force(&CAT); // listed by `gst-inspect-1.0 --gst-debug-help` from now on
    gst::Tracer::register(Some(plugin), "latlab", LatlabTracer::static_type())
}

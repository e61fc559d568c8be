//! GStreamer plugin `latlab`: the latlab tracer.
//!
//! Load it with `GST_TRACERS=latlab` (and `GST_PLUGIN_PATH` pointing at the
//! build directory). It records every buffer pushed on every pad into a
//! binary trace file, see `docs/trace-format.md`.

use gst::glib;

mod latlab;

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    latlab::register(plugin)
}

gst::plugin_define!(
    latlab,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    env!("CARGO_PKG_VERSION"),
    "MIT/X11",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    "https://github.com/latlab/latlab"
);

//! Tracer settings, from the `params` property and the environment.

use std::path::PathBuf;
use std::str::FromStr;

use gst::prelude::*;

use super::CAT;

/// Default per-thread ring capacity in records.
pub const DEFAULT_RING: usize = 65536;
/// Default interval of the `STATS` chunks in milliseconds.
pub const DEFAULT_STATS_INTERVAL_MS: u64 = 100;

/// Settings of the tracer; unset fields fall back to the environment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settings {
    pub file: Option<PathBuf>,
    pub dir: Option<PathBuf>,
    pub process: Option<String>,
    pub ring: Option<usize>,
    /// Interval of the `STATS` chunks in ms, 0 = none.
    pub stats_interval_ms: Option<u64>,
}

impl Settings {
    /// Parses `params` (e.g. `dir=/tmp/x,process=sender`) as a `gst::Structure`.
    ///
    /// Unknown fields and unparsable params are reported (debug category `latlab`,
    /// level WARNING) and ignored.
    pub fn from_params(params: Option<&str>) -> Self {
        let params = params.map(str::trim).unwrap_or_default();
        if params.is_empty() {
            return Settings::default();
        }
        let s = match gst::Structure::from_str(&format!("latlab,{params}")) {
            Ok(s) => s,
            Err(_) => {
                gst::warning!(CAT, "cannot parse params '{params}', ignoring them");
                return Settings::default();
            }
        };
        let mut settings = Settings::default();
        for (field, value) in s.iter() {
            let text = value
                .get::<String>()
                .ok()
                .or_else(|| value.serialize().ok().map(|v| v.to_string()));
            match (field.as_str(), text) {
                ("file", Some(v)) => settings.file = Some(v.into()),
                ("dir", Some(v)) => settings.dir = Some(v.into()),
                ("process", Some(v)) => settings.process = Some(v),
                ("ring", Some(v)) => settings.ring = v.trim().parse().ok(),
                ("stats-interval-ms", Some(v)) => {
                    settings.stats_interval_ms = v.trim().parse().ok()
                }
                (other, _) => gst::warning!(CAT, "ignoring unknown param '{other}'"),
            }
        }
        settings
    }

    /// Per-thread ring capacity in records.
    pub fn ring_capacity(&self) -> usize {
        self.ring.filter(|&n| n > 0).unwrap_or(DEFAULT_RING)
    }

    /// Interval of the `STATS` chunks in ms (0 disables them): param
    /// `stats-interval-ms`, `LATLAB_STATS_INTERVAL_MS`, else 100.
    pub fn stats_interval_ms(&self) -> u64 {
        self.stats_interval_ms
            .or_else(|| {
                env_nonempty("LATLAB_STATS_INTERVAL_MS").and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(DEFAULT_STATS_INTERVAL_MS)
    }

    /// The latlab process name: param, `LATLAB_PROCESS`, else the program name.
    pub fn process_name(&self) -> String {
        self.process
            .clone()
            .or_else(|| env_nonempty("LATLAB_PROCESS"))
            .unwrap_or_else(program_name)
    }

    /// Output file: param `file`, `LATLAB_TRACE_FILE`, else `<dir>/<process>-<pid>.lltrace`.
    pub fn output_path(&self, pid: u32) -> PathBuf {
        if let Some(file) = self.file.clone() {
            return file;
        }
        if let Some(file) = env_nonempty("LATLAB_TRACE_FILE") {
            return file.into();
        }
        let dir = self
            .dir
            .clone()
            .or_else(|| env_nonempty("LATLAB_TRACE_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."));
        let process = self.process_name().replace('/', "_");
        dir.join(format!("{process}-{pid}.lltrace"))
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// GLib's program name, else the kernel's name of the process.
fn program_name() -> String {
    if let Some(name) = gst::glib::prgname() {
        return name.to_string();
    }
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_params() {
        gst::init().unwrap();
        let s = Settings::from_params(Some(
            "dir=/tmp/x,process=sender,ring=1024,stats-interval-ms=0",
        ));
        assert_eq!(s.stats_interval_ms(), 0);
        assert_eq!(s.dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(s.process.as_deref(), Some("sender"));
        assert_eq!(s.ring_capacity(), 1024);
        assert_eq!(s.output_path(42), PathBuf::from("/tmp/x/sender-42.lltrace"));
    }

    #[test]
    fn file_param_wins() {
        gst::init().unwrap();
        let s = Settings::from_params(Some("file=/tmp/a.lltrace,dir=/tmp/x"));
        assert_eq!(s.output_path(1), PathBuf::from("/tmp/a.lltrace"));
        assert_eq!(s.ring_capacity(), DEFAULT_RING);
    }

    #[test]
    fn empty_params_are_defaults() {
        assert_eq!(Settings::from_params(None), Settings::default());
        assert_eq!(Settings::from_params(Some("  ")), Settings::default());
    }
}

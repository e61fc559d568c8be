//! Lifecycle lines on stderr (`latlab-sfu: LEVEL message`), through the `log` facade;
//! str0m's own `tracing` events arrive here too (its `log` feature), at most at
//! warning level unless `--log debug` or `trace` is asked for. Nothing logs per packet
//! at the default level.

use std::io::Write;

struct Stderr {
    level: log::LevelFilter,
}

impl log::Log for Stderr {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        let ours = meta.target().starts_with("latlab_sfu");
        let limit = if ours || self.level >= log::LevelFilter::Debug {
            self.level
        } else {
            self.level.min(log::LevelFilter::Warn)
        };
        meta.level() <= limit
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let target = record.target();
        let origin = if target.starts_with("latlab_sfu") {
            String::new()
        } else {
            format!("{target}: ")
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "latlab-sfu: {} {origin}{}",
            record.level().as_str().to_ascii_lowercase(),
            record.args()
        );
    }

    fn flush(&self) {}
}

pub fn init(level: log::LevelFilter) {
    let logger = Box::leak(Box::new(Stderr { level }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

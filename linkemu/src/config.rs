//! The emulator's configuration file (JSON, written by latlab from the scenario).

use serde::Deserialize;

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    Uniform,
    Normal,
    Pareto,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum LossModel {
    #[serde(rename = "bernoulli")]
    Bernoulli,
    #[serde(rename = "gilbert-elliott")]
    GilbertElliott,
}

/// The impairment of one direction. Percentages are 0..=100.
///
/// Gilbert–Elliott: `ge_p` = P(Good → Bad), `ge_r` = P(Bad → Good) per packet,
/// `ge_h` = loss probability in Bad, `ge_k` = loss probability in Good (netem's
/// `gemodel p r 1-h 1-k` arguments, in that order).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Impairment {
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub jitter_dist: JitterDist,
    pub loss_pct: f64,
    pub loss_model: LossModel,
    pub ge_p: f64,
    pub ge_r: f64,
    pub ge_h: f64,
    pub ge_k: f64,
    pub rate_kbit: f64,
    pub queue_ms: f64,
    pub reorder_pct: f64,
    pub duplicate_pct: f64,
}

impl Default for Impairment {
    fn default() -> Self {
        Impairment {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            jitter_dist: JitterDist::Normal,
            loss_pct: 0.0,
            loss_model: LossModel::Bernoulli,
            ge_p: 0.0,
            ge_r: 100.0,
            ge_h: 100.0,
            ge_k: 0.0,
            rate_kbit: 0.0,
            queue_ms: 50.0,
            reorder_pct: 0.0,
            duplicate_pct: 0.0,
        }
    }
}

/// Some keys of an [`Impairment`], as a schedule entry sets them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialImpairment {
    pub delay_ms: Option<f64>,
    pub jitter_ms: Option<f64>,
    pub jitter_dist: Option<JitterDist>,
    pub loss_pct: Option<f64>,
    pub loss_model: Option<LossModel>,
    pub ge_p: Option<f64>,
    pub ge_r: Option<f64>,
    pub ge_h: Option<f64>,
    pub ge_k: Option<f64>,
    pub rate_kbit: Option<f64>,
    pub queue_ms: Option<f64>,
    pub reorder_pct: Option<f64>,
    pub duplicate_pct: Option<f64>,
}

macro_rules! apply_fields {
    ($target:expr, $src:expr, $($field:ident),*) => {
        $(if let Some(v) = $src.$field { $target.$field = v; })*
    };
}

impl Impairment {
    /// This impairment with the keys `set` gives replaced.
    pub fn with(mut self, set: &PartialImpairment) -> Impairment {
        apply_fields!(
            self,
            set,
            delay_ms,
            jitter_ms,
            jitter_dist,
            loss_pct,
            loss_model,
            ge_p,
            ge_r,
            ge_h,
            ge_k,
            rate_kbit,
            queue_ms,
            reorder_pct,
            duplicate_pct
        );
        self
    }

    /// A one-line problem if a value is out of range.
    pub fn check(&self) -> Result<(), String> {
        let values = [
            ("delay_ms", self.delay_ms, f64::MAX),
            ("jitter_ms", self.jitter_ms, f64::MAX),
            ("loss_pct", self.loss_pct, 100.0),
            ("ge_p", self.ge_p, 100.0),
            ("ge_r", self.ge_r, 100.0),
            ("ge_h", self.ge_h, 100.0),
            ("ge_k", self.ge_k, 100.0),
            ("rate_kbit", self.rate_kbit, f64::MAX),
            ("queue_ms", self.queue_ms, f64::MAX),
            ("reorder_pct", self.reorder_pct, 100.0),
            ("duplicate_pct", self.duplicate_pct, 100.0),
        ];
        for (name, value, max) in values {
            if !(value.is_finite() && (0.0..=max).contains(&value)) {
                return Err(format!("{name} = {value} is out of range 0..={max}"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Forward,
    Reverse,
    Both,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    pub at_s: f64,
    #[serde(default = "both")]
    pub direction: Direction,
    pub set: PartialImpairment,
}

fn both() -> Direction {
    Direction::Both
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub forward: Impairment,
    #[serde(default)]
    pub reverse: Impairment,
    #[serde(default)]
    pub schedule: Vec<ScheduleEntry>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Free text describing the link (stored in the log's info block).
    #[serde(default)]
    pub name: String,
    /// The two hosts, `[a, b]` (stored in the log's info block).
    #[serde(default)]
    pub between: Vec<String>,
}

fn default_seed() -> u64 {
    1
}

impl Config {
    /// Parse and check a configuration; errors are one line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = serde_json::from_str(text).map_err(|e| e.to_string())?;
        config
            .forward
            .check()
            .map_err(|e| format!("forward: {e}"))?;
        config
            .reverse
            .check()
            .map_err(|e| format!("reverse: {e}"))?;
        for (i, entry) in config.schedule.iter().enumerate() {
            if !(entry.at_s.is_finite() && entry.at_s >= 0.0) {
                return Err(format!("schedule[{i}]: at_s must be >= 0"));
            }
            for base in [config.forward, config.reverse] {
                base.with(&entry.set)
                    .check()
                    .map_err(|e| format!("schedule[{i}]: {e}"))?;
            }
        }
        Ok(config)
    }

    /// The schedule of one direction (`reverse` false: forward), sorted by time, in ns.
    pub fn schedule_for(&self, reverse: bool) -> Vec<(u64, PartialImpairment)> {
        let mut out: Vec<(u64, PartialImpairment)> = self
            .schedule
            .iter()
            .filter(|e| match e.direction {
                Direction::Both => true,
                Direction::Forward => !reverse,
                Direction::Reverse => reverse,
            })
            .map(|e| ((e.at_s * 1e9) as u64, e.set))
            .collect();
        out.sort_by_key(|(t, _)| *t);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_config() {
        let c = Config::parse(
            r#"{"forward": {"delay_ms": 20, "jitter_ms": 5, "jitter_dist": "uniform",
                "loss_model": "gilbert-elliott", "ge_p": 1, "ge_r": 20},
                "reverse": {"delay_ms": 5},
                "schedule": [{"at_s": 1.5, "direction": "reverse", "set": {"rate_kbit": 600}}],
                "seed": 7}"#,
        )
        .unwrap();
        assert_eq!(c.forward.jitter_dist, JitterDist::Uniform);
        assert_eq!(c.forward.loss_model, LossModel::GilbertElliott);
        assert_eq!(c.reverse.delay_ms, 5.0);
        assert!(c.schedule_for(false).is_empty());
        let rev = c.schedule_for(true);
        assert_eq!(rev[0].0, 1_500_000_000);
        assert_eq!(c.reverse.with(&rev[0].1).rate_kbit, 600.0);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(Config::parse(r#"{"forward": {"loss_pct": 101}}"#).is_err());
        assert!(Config::parse(r#"{"forward": {"delay_ms": -1}}"#).is_err());
        assert!(Config::parse(r#"{"forward": {"jitter_dist": "cauchy"}}"#).is_err());
        assert!(Config::parse(r#"{"forward": {"bogus": 1}}"#).is_err());
    }
}

//! The impairment model of one direction: loss, duplication, rate bottleneck, delay.
//!
//! Order as in netem: loss and duplication are decided first, then the packet
//! crosses the rate bottleneck (serialised at `rate_kbit`, tail-dropped when the
//! backlog would exceed `queue_ms`), then it gets its delay and jitter.

use crate::config::{Impairment, JitterDist, LossModel};

/// xoshiro256++ seeded through splitmix64: fast, reproducible, no allocation.
pub struct Rng {
    s: [u64; 4],
    spare_normal: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
            spare_normal: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: f64) -> bool {
        pct > 0.0 && self.uniform() * 100.0 < pct
    }

    /// Standard normal (Box–Muller, both values used).
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.spare_normal.take() {
            return v;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
        self.spare_normal = Some(r * s);
        r * c
    }
}

/// Pareto shape used for `jitter_dist = "pareto"`; its samples are shifted and scaled
/// to mean 0 and standard deviation 1 before multiplying by `jitter_ms`.
const PARETO_ALPHA: f64 = 3.0;

/// What becomes of one packet copy at the bottleneck and delay stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fate {
    /// Tail-dropped at the bottleneck queue.
    QueueDrop,
    /// Released at `at` (CLOCK_MONOTONIC ns); `reordered`: sent without the delay.
    Send { at: u64, reordered: bool },
}

pub struct Model {
    pub imp: Impairment,
    rng: Rng,
    ge_bad: bool,
    /// When the bottleneck finishes serialising what it holds (ns, fractional).
    tx_free_ns: f64,
    /// Latest release time handed out without reordering (FIFO without jitter).
    last_release: u64,
}

impl Model {
    pub fn new(imp: Impairment, seed: u64) -> Model {
        Model {
            imp,
            rng: Rng::new(seed),
            ge_bad: false,
            tx_free_ns: 0.0,
            last_release: 0,
        }
    }

    /// Whether the loss model drops the next packet (advances the Gilbert–Elliott chain).
    pub fn lose(&mut self) -> bool {
        match self.imp.loss_model {
            LossModel::Bernoulli => self.rng.chance(self.imp.loss_pct),
            LossModel::GilbertElliott => {
                let lost = if self.ge_bad {
                    self.rng.chance(self.imp.ge_h)
                } else {
                    self.rng.chance(self.imp.ge_k)
                };
                let flip = if self.ge_bad {
                    self.imp.ge_r
                } else {
                    self.imp.ge_p
                };
                if self.rng.chance(flip) {
                    self.ge_bad = !self.ge_bad;
                }
                lost
            }
        }
    }

    /// Whether the next packet is duplicated.
    pub fn duplicate(&mut self) -> bool {
        self.rng.chance(self.imp.duplicate_pct)
    }

    /// Bottleneck and delay for one packet copy of `size` bytes arriving at `arrival`.
    pub fn schedule(&mut self, arrival: u64, size: u32) -> Fate {
        let mut depart = arrival as f64;
        if self.imp.rate_kbit > 0.0 {
            let serialise = size as f64 * 8e6 / self.imp.rate_kbit;
            let start = depart.max(self.tx_free_ns);
            if start - depart + serialise > self.imp.queue_ms * 1e6 {
                return Fate::QueueDrop;
            }
            self.tx_free_ns = start + serialise;
            depart = self.tx_free_ns;
        }
        if self.rng.chance(self.imp.reorder_pct) {
            return Fate::Send {
                at: depart as u64,
                reordered: true,
            };
        }
        let delay = (self.imp.delay_ms * 1e6 + self.jitter_ns()).max(0.0);
        let mut at = (depart + delay) as u64;
        if self.imp.jitter_ms == 0.0 {
            at = at.max(self.last_release);
        }
        self.last_release = self.last_release.max(at);
        Fate::Send {
            at,
            reordered: false,
        }
    }

    fn jitter_ns(&mut self) -> f64 {
        let j = self.imp.jitter_ms * 1e6;
        if j == 0.0 {
            return 0.0;
        }
        let unit = match self.imp.jitter_dist {
            JitterDist::Uniform => 2.0 * self.rng.uniform() - 1.0,
            JitterDist::Normal => self.rng.normal(),
            JitterDist::Pareto => {
                let a = PARETO_ALPHA;
                let x = (1.0 - self.rng.uniform()).powf(-1.0 / a);
                let mean = a / (a - 1.0);
                let sd = (a / ((a - 1.0) * (a - 1.0) * (a - 2.0))).sqrt();
                (x - mean) / sd
            }
        };
        unit * j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(f: impl FnOnce(&mut Impairment)) -> Model {
        let mut imp = Impairment::default();
        f(&mut imp);
        Model::new(imp, 42)
    }

    #[test]
    fn bernoulli_rate() {
        let mut m = model(|i| i.loss_pct = 10.0);
        let lost = (0..100_000).filter(|_| m.lose()).count();
        assert!((9_500..10_500).contains(&lost), "{lost}");
    }

    #[test]
    fn gilbert_elliott_rate() {
        let mut m = model(|i| {
            i.loss_model = LossModel::GilbertElliott;
            i.ge_p = 2.0;
            i.ge_r = 20.0;
        });
        let lost = (0..200_000).filter(|_| m.lose()).count() as f64 / 200_000.0;
        let expected = 2.0 / 22.0;
        assert!((lost - expected).abs() < 0.01, "{lost} vs {expected}");
    }

    #[test]
    fn fifo_without_jitter_and_rate() {
        let mut m = model(|i| {
            i.delay_ms = 10.0;
            i.rate_kbit = 1000.0;
            i.queue_ms = 20.0;
        });
        // 125 bytes = 1 ms at 1000 kbit/s; 30 back-to-back packets: 20 fit.
        let fates: Vec<_> = (0..30).map(|_| m.schedule(1_000_000_000, 125)).collect();
        let sent: Vec<u64> = fates
            .iter()
            .filter_map(|f| match f {
                Fate::Send { at, .. } => Some(*at),
                Fate::QueueDrop => None,
            })
            .collect();
        assert_eq!(sent.len(), 20);
        assert_eq!(sent[0], 1_011_000_000);
        assert!(sent.windows(2).all(|w| w[1] - w[0] == 1_000_000));
    }

    #[test]
    fn jitter_moments() {
        for dist in [JitterDist::Uniform, JitterDist::Normal, JitterDist::Pareto] {
            let mut m = model(|i| {
                i.delay_ms = 50.0;
                i.jitter_ms = 5.0;
                i.jitter_dist = dist;
            });
            let d: Vec<f64> = (0..200_000)
                .map(|_| match m.schedule(0, 100) {
                    Fate::Send { at, .. } => at as f64 / 1e6,
                    Fate::QueueDrop => unreachable!(),
                })
                .collect();
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64;
            let sd = var.sqrt();
            let expected_sd = if dist == JitterDist::Uniform {
                5.0 / 3f64.sqrt()
            } else {
                5.0
            };
            assert!((mean - 50.0).abs() < 0.1, "{dist:?} mean {mean}");
            // Pareto with shape 3 has an infinite fourth moment: a looser bound.
            let tol = if dist == JitterDist::Pareto { 0.5 } else { 0.1 };
            assert!((sd - expected_sd).abs() < tol, "{dist:?} sd {sd}");
        }
    }
}

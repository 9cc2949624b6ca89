//! Calibration triggers on data time: periodic, and random (a Poisson process with a seed, so
//! a run is reproducible). They fire as the merged stream's horizon passes their next time.

use crate::config::{PeriodicConfig, RandomConfig, TICKS_PER_SECOND};
use crate::decision::{Candidate, trigger_type};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub trait CalibrationTrigger: Send {
    /// Candidates due before `horizon`, in time order.
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>);
    /// A new rate from the next candidate on (run control).
    fn set_rate(&mut self, rate_hz: f64);
}

pub struct Periodic {
    period_ticks: u64,
    next: Option<u64>,
}

impl Periodic {
    pub fn new(config: &PeriodicConfig) -> Self {
        Self {
            period_ticks: Self::period_ticks(config.rate_hz),
            next: None,
        }
    }

    fn period_ticks(rate_hz: f64) -> u64 {
        ((TICKS_PER_SECOND / rate_hz).round() as u64).max(1)
    }
}

impl CalibrationTrigger for Periodic {
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>) {
        // The first trigger comes one period after the data starts.
        let next = self.next.get_or_insert(horizon + self.period_ticks);
        while *next < horizon {
            out.push(Candidate {
                timestamp: *next,
                trigger_type: trigger_type::PERIODIC,
            });
            *next += self.period_ticks;
        }
    }

    fn set_rate(&mut self, rate_hz: f64) {
        self.period_ticks = Self::period_ticks(rate_hz);
    }
}

pub struct Random {
    mean_interval_ticks: f64,
    rng: Xoshiro256PlusPlus,
    next: Option<u64>,
}

impl Random {
    pub fn new(config: &RandomConfig) -> Self {
        Self {
            mean_interval_ticks: TICKS_PER_SECOND / config.rate_hz,
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            next: None,
        }
    }

    fn interval(&mut self) -> u64 {
        // Exponential intervals by inversion; 1 - u is in (0, 1], so the log is finite.
        let u: f64 = self.rng.random();
        ((-(1.0 - u).ln() * self.mean_interval_ticks) as u64).max(1)
    }
}

impl CalibrationTrigger for Random {
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>) {
        if self.next.is_none() {
            self.next = Some(horizon + self.interval());
        }
        while let Some(next) = self.next.filter(|&n| n < horizon) {
            out.push(Candidate {
                timestamp: next,
                trigger_type: trigger_type::RANDOM,
            });
            self.next = Some(next + self.interval());
        }
    }

    fn set_rate(&mut self, rate_hz: f64) {
        self.mean_interval_ticks = TICKS_PER_SECOND / rate_hz;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_fires_every_period_of_data_time() {
        let mut p = Periodic::new(&PeriodicConfig {
            enabled: true,
            rate_hz: 1000.0,
            prescale: 1,
        });
        let mut out = Vec::new();
        p.advance(1_000, &mut out);
        assert!(out.is_empty());
        p.advance(1_000 + 62_500 * 3 + 1, &mut out);
        let times: Vec<u64> = out.iter().map(|c| c.timestamp).collect();
        assert_eq!(times, [63_500, 126_000, 188_500]);
    }

    #[test]
    fn random_has_the_configured_mean_rate_and_is_reproducible() {
        let config = RandomConfig {
            enabled: true,
            rate_hz: 100.0,
            seed: 7,
            prescale: 1,
        };
        let run = || {
            let mut r = Random::new(&config);
            let mut out = Vec::new();
            r.advance(0, &mut out);
            r.advance(62_500_000 * 100, &mut out);
            out
        };
        let out = run();
        // 100 s at 100 Hz: 10000 ± 100 (1 sigma); allow 4 sigma.
        assert!((out.len() as i64 - 10_000).abs() < 400, "{}", out.len());
        assert!(out.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
        assert_eq!(out, run());
    }
}

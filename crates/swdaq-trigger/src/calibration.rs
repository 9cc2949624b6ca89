//! Calibration triggers on data time: periodic, and random (a Poisson process with a seed, so
//! a run is reproducible). They fire as the merged stream's horizon passes their next time.
//!
//! Data time can jump: a front end restarts, or garbage is taken for a timestamp (a random
//! 64-bit time is ~10^11 s of data time ahead). Firing every period of such a jump would make
//! ~10^11 candidates, so a jump beyond [`MAX_CATCH_UP_S`] is a discontinuity: the trigger
//! counts it and starts again from the new horizon, as at the start of the data.

use crate::config::{PeriodicConfig, RandomConfig};
use crate::decision::{Candidate, trigger_type};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The most data time a calibration trigger fills in at one step. The merged horizon moves by
/// about a TP batch (~1 ms) per step, or by the late-link wait when a link falls silent.
pub const MAX_CATCH_UP_S: f64 = 1.0;

pub trait CalibrationTrigger: Send {
    /// Candidates due before `horizon`, in time order; `true` when the horizon jumped past
    /// [`MAX_CATCH_UP_S`] and the trigger started again from it.
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>) -> bool;
    /// A new rate from the next candidate on (run control).
    fn set_rate(&mut self, rate_hz: f64);
}

pub struct Periodic {
    /// Data-time ticks per second: the links' clock (62.5 MHz WIBEth, 50 MHz ProtoDUNE WIB).
    clock_hz: f64,
    period_ticks: u64,
    next: Option<u64>,
}

/// Whether `horizon` lies more than [`MAX_CATCH_UP_S`] of data time past `next`.
fn jumped(next: Option<u64>, horizon: u64, clock_hz: f64) -> bool {
    next.is_some_and(|n| horizon.saturating_sub(n) as f64 > MAX_CATCH_UP_S * clock_hz)
}

impl Periodic {
    pub fn new(config: &PeriodicConfig, clock_hz: f64) -> Self {
        Self {
            clock_hz,
            period_ticks: Self::period_ticks(clock_hz, config.rate_hz),
            next: None,
        }
    }

    fn period_ticks(clock_hz: f64, rate_hz: f64) -> u64 {
        ((clock_hz / rate_hz).round() as u64).max(1)
    }
}

impl CalibrationTrigger for Periodic {
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>) -> bool {
        let jump = jumped(self.next, horizon, self.clock_hz);
        if jump {
            self.next = None;
        }
        // The first trigger comes one period after the data starts. Saturating: a time near
        // the end of the clock's range stops at u64::MAX, which is never before a horizon.
        let next = self
            .next
            .get_or_insert(horizon.saturating_add(self.period_ticks));
        while *next < horizon {
            out.push(Candidate {
                timestamp: *next,
                trigger_type: trigger_type::PERIODIC,
            });
            *next = next.saturating_add(self.period_ticks);
        }
        jump
    }

    fn set_rate(&mut self, rate_hz: f64) {
        self.period_ticks = Self::period_ticks(self.clock_hz, rate_hz);
    }
}

pub struct Random {
    /// Data-time ticks per second, as for [`Periodic`].
    clock_hz: f64,
    mean_interval_ticks: f64,
    rng: Xoshiro256PlusPlus,
    next: Option<u64>,
}

impl Random {
    pub fn new(config: &RandomConfig, clock_hz: f64) -> Self {
        Self {
            clock_hz,
            mean_interval_ticks: clock_hz / config.rate_hz,
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
    fn advance(&mut self, horizon: u64, out: &mut Vec<Candidate>) -> bool {
        let jump = jumped(self.next, horizon, self.clock_hz);
        if jump || self.next.is_none() {
            self.next = Some(horizon.saturating_add(self.interval()));
        }
        while let Some(next) = self.next.filter(|&n| n < horizon) {
            out.push(Candidate {
                timestamp: next,
                trigger_type: trigger_type::RANDOM,
            });
            self.next = Some(next.saturating_add(self.interval()));
        }
        jump
    }

    fn set_rate(&mut self, rate_hz: f64) {
        self.mean_interval_ticks = self.clock_hz / rate_hz;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WIBETH_CLOCK_HZ: f64 = 62.5e6;

    #[test]
    fn periodic_fires_every_period_of_data_time() {
        let mut p = Periodic::new(
            &PeriodicConfig {
                enabled: true,
                rate_hz: 1000.0,
                prescale: 1,
            },
            WIBETH_CLOCK_HZ,
        );
        let mut out = Vec::new();
        p.advance(1_000, &mut out);
        assert!(out.is_empty());
        p.advance(1_000 + 62_500 * 3 + 1, &mut out);
        let times: Vec<u64> = out.iter().map(|c| c.timestamp).collect();
        assert_eq!(times, [63_500, 126_000, 188_500]);
    }

    /// ProtoDUNE WIB data time runs at 50 MHz: 10 Hz is a trigger every 5 M ticks there, not
    /// every 6.25 M, and so is a new rate (taken from the candidate already due on).
    #[test]
    fn rates_are_in_the_links_own_clock() {
        let config = PeriodicConfig {
            enabled: true,
            rate_hz: 10.0,
            prescale: 1,
        };
        let mut p = Periodic::new(&config, 50e6);
        let mut out = Vec::new();
        p.advance(0, &mut out);
        p.advance(15_000_001, &mut out);
        p.set_rate(20.0);
        p.advance(25_000_001, &mut out);
        let times: Vec<u64> = out.iter().map(|c| c.timestamp).collect();
        assert_eq!(
            times,
            [
                5_000_000, 10_000_000, 15_000_000, 20_000_000, 22_500_000, 25_000_000
            ]
        );
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
            let mut r = Random::new(&config, WIBETH_CLOCK_HZ);
            let mut out = Vec::new();
            // 100 s of data time in 1 ms steps, as the merged horizon moves.
            for step in 0..=100_000u64 {
                assert!(!r.advance(step * 62_500, &mut out));
            }
            out
        };
        let out = run();
        // 100 s at 100 Hz: 10000 ± 100 (1 sigma); allow 4 sigma.
        assert!((out.len() as i64 - 10_000).abs() < 400, "{}", out.len());
        assert!(out.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
        assert_eq!(out, run());
    }

    /// A garbage timestamp (here near the end of the clock's range) is a jump: counted, no
    /// candidate for the periods it skipped, and firing resumes a period after the new time.
    #[test]
    fn a_jump_in_data_time_fires_nothing_for_the_gap() {
        let config = PeriodicConfig {
            enabled: true,
            rate_hz: 1000.0,
            prescale: 1,
        };
        let mut p = Periodic::new(&config, WIBETH_CLOCK_HZ);
        let mut out = Vec::new();
        assert!(!p.advance(0, &mut out));
        assert!(!p.advance(62_500 * 2 + 1, &mut out));
        assert_eq!(out.len(), 2);
        let far = u64::MAX - 10;
        assert!(p.advance(far, &mut out));
        assert_eq!(out.len(), 2, "nothing for the jump itself");
        assert!(!p.advance(u64::MAX, &mut out));
        assert_eq!(
            out.len(),
            2,
            "the next period lies beyond the clock's range"
        );

        let mut r = Random::new(
            &RandomConfig {
                enabled: true,
                rate_hz: 1000.0,
                seed: 3,
                prescale: 1,
            },
            WIBETH_CLOCK_HZ,
        );
        let mut out = Vec::new();
        r.advance(0, &mut out);
        assert!(r.advance(1 << 62, &mut out));
        assert!(out.is_empty());
        assert!(!r.advance((1 << 62) + 62_500_000 / 2, &mut out));
        assert!((300..700).contains(&out.len()), "{}", out.len());
    }

    proptest::proptest! {
        /// Whatever horizons garbage makes, a step costs at most a second's worth of
        /// candidates (plus one) and never loops for ever.
        #[test]
        fn any_horizons_give_a_bounded_number_of_candidates(
            horizons in proptest::collection::vec(proptest::num::u64::ANY, 1..50),
            rate_hz in 0.1f64..10_000.0,
        ) {
            let config = PeriodicConfig { enabled: true, rate_hz, prescale: 1 };
            let mut p = Periodic::new(&config, WIBETH_CLOCK_HZ);
            let mut horizon = 0;
            for h in horizons {
                horizon = horizon.max(h);
                let mut out = Vec::new();
                p.advance(horizon, &mut out);
                proptest::prop_assert!(out.len() as f64 <= rate_hz * MAX_CATCH_UP_S + 2.0);
            }
        }
    }
}

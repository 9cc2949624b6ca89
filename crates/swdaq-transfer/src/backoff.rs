//! Bounded exponential back-off between a failed attempt and the next: the first wait after
//! the first failure, doubled after each further one, never more than the maximum.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(5),
            max: Duration::from_secs(600),
        }
    }
}

impl Backoff {
    /// The wait after `failures` failed attempts in a row (0: none, no wait).
    pub fn after(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        // 2^31 times any first wait is past any maximum; the shift cannot overflow.
        let factor = 1u32 << (failures - 1).min(31);
        self.first.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_first_and_stop_at_the_maximum() {
        let b = Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let waits: Vec<u128> = (0..7).map(|n| b.after(n).as_millis()).collect();
        assert_eq!(waits, [0, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.after(u32::MAX), Duration::from_secs(1), "no overflow");
        let huge = Backoff {
            first: Duration::from_secs(u64::MAX / 2),
            max: Duration::from_secs(60),
        };
        assert_eq!(huge.after(40), Duration::from_secs(60));
    }
}

//! A run's histogram against the reference run's, by a stated test, into a quality flag: Good,
//! Bad, or Undetermined when either has too few entries to tell. The tests are those CMS's and
//! ALICE's quality control use for histograms of counts:
//! - **chi2** for two unweighted histograms (ROOT's `TH1::Chi2Test` "UU", Gagunashvili's
//!   statistic): `chi2 = sum_i (N2 n1_i - N1 n2_i)^2 / (N1 N2 (n1_i + n2_i))` over the bins
//!   either fills, `ndf` = those bins - 1, probability = the chi-square survival function;
//! - **Kolmogorov**: the largest distance `D` between the two normalised cumulative
//!   distributions, `z = D sqrt(N1 N2 / (N1 + N2))`, probability
//!   `2 sum_j (-1)^(j-1) exp(-2 j^2 z^2)` (ROOT's `TMath::KolmogorovProb`); on binned data it
//!   is approximate, as ROOT says of `TH1::KolmogorovTest`.
//!
//! Under- and overflow count as bins in both: a distribution moving out of range has changed.
//! A histogram of rare occurrences (errors by e-link) has no shape to compare: each bin's
//! count is judged against the reference's rate per event ([`compare_counts`], Poisson).
//! A probability below `min_probability` is Bad.

use crate::hist::{Hist1, HistError};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF, DiscreteCDF, Poisson};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    Chi2,
    Kolmogorov,
}

/// The test a verdict was reached by: a check's [`Test`] for a distribution, Poisson for a
/// histogram of rare counts ([`compare_counts`], chosen by the histogram's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    Chi2,
    Kolmogorov,
    Poisson,
}

impl From<Test> for Method {
    fn from(test: Test) -> Method {
        match test {
            Test::Chi2 => Method::Chi2,
            Test::Kolmogorov => Method::Kolmogorov,
        }
    }
}

/// How a histogram is judged against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub test: Test,
    /// Below this probability of the two coming from one distribution: Bad.
    pub min_probability: f64,
    /// Fewer entries than this in either histogram: Undetermined.
    pub min_entries: u64,
}

impl Default for Check {
    fn default() -> Check {
        Check {
            test: Test::Chi2,
            min_probability: 0.01,
            min_entries: 100,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Quality {
    /// Worst first when sorted.
    Bad,
    Undetermined,
    Good,
}

/// A comparison's outcome: the flag, the test's statistic and probability, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub quality: Quality,
    pub test: Method,
    pub statistic: Option<f64>,
    pub probability: Option<f64>,
    pub why: String,
}

/// Judges `run` against `reference` by `check`.
pub fn compare(run: &Hist1, reference: &Hist1, check: &Check) -> Result<Verdict, HistError> {
    run.same_binning(reference)?;
    let (n1, n2) = (run.entries(), reference.entries());
    if n1 < check.min_entries || n2 < check.min_entries {
        return Ok(Verdict {
            quality: Quality::Undetermined,
            test: check.test.into(),
            statistic: None,
            probability: None,
            why: format!(
                "{n1} entries against the reference's {n2}: fewer than {} to tell",
                check.min_entries
            ),
        });
    }
    let (statistic, probability) = match check.test {
        Test::Kolmogorov => kolmogorov(&run.counts, &reference.counts),
        Test::Chi2 => chi2(&run.counts, &reference.counts),
    };
    let quality = if probability < check.min_probability {
        Quality::Bad
    } else {
        Quality::Good
    };
    Ok(Verdict {
        quality,
        test: check.test.into(),
        statistic: Some(statistic),
        probability: Some(probability),
        why: format!(
            "{:?} {statistic:.3}, probability {probability:.3e} ({} {})",
            check.test,
            if quality == Quality::Bad {
                "below"
            } else {
                "at least"
            },
            check.min_probability
        ),
    })
}

/// Judges a histogram of rare occurrences ([`HistKind::Counts`]) filled over `run_events`
/// events against the reference's over `reference_events`: each bin's count against what
/// the reference's rate per event predicts (at least one over the run, so a single
/// occurrence is no alarm), by the Poisson probability of so many or more. The least
/// probable bin decides.
pub fn compare_counts(
    run: &Hist1,
    run_events: u64,
    reference: &Hist1,
    reference_events: u64,
    check: &Check,
) -> Result<Verdict, HistError> {
    run.same_binning(reference)?;
    if run_events < check.min_entries || reference_events < check.min_entries {
        return Ok(Verdict {
            quality: Quality::Undetermined,
            test: Method::Poisson,
            statistic: None,
            probability: None,
            why: format!(
                "{run_events} events against the reference's {reference_events}: fewer than {} to tell",
                check.min_entries
            ),
        });
    }
    let scale = run_events as f64 / reference_events as f64;
    let (worst, probability, expected) = run
        .counts
        .iter()
        .zip(&reference.counts)
        .enumerate()
        .map(|(slot, (&seen, &before))| {
            let expected = (before as f64 * scale).max(1.0);
            let probability = Poisson::new(expected)
                .map_or(0.0, |d| if seen == 0 { 1.0 } else { d.sf(seen - 1) });
            (slot, probability, expected)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("a histogram has at least under- and overflow");
    let quality = if probability < check.min_probability {
        Quality::Bad
    } else {
        Quality::Good
    };
    let bin = match worst {
        0 => "the underflow".to_string(),
        s if s == run.axis.bins + 1 => "the overflow".to_string(),
        s => format!(
            "{} {}",
            run.axis.label,
            run.axis.lo + (s - 1) as f64 * (run.axis.hi - run.axis.lo) / run.axis.bins as f64
        ),
    };
    Ok(Verdict {
        quality,
        test: Method::Poisson,
        statistic: Some(run.counts[worst] as f64),
        probability: Some(probability),
        why: format!(
            "{bin}: {} against {expected:.1} expected from the reference, probability {probability:.3e}",
            run.counts[worst]
        ),
    })
}

/// The chi2 statistic of two histograms of counts and its probability.
fn chi2(a: &[u64], b: &[u64]) -> (f64, f64) {
    let (n1, n2) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let (mut statistic, mut used) = (0.0, 0usize);
    for (&x, &y) in a.iter().zip(b) {
        if x + y == 0 {
            continue;
        }
        let (x, y) = (x as f64, y as f64);
        statistic += (n2 * x - n1 * y).powi(2) / (n1 * n2 * (x + y));
        used += 1;
    }
    if used < 2 {
        // One bin holds everything in both: the shapes are the same.
        return (0.0, 1.0);
    }
    let probability = ChiSquared::new((used - 1) as f64).map_or(0.0, |d| d.sf(statistic));
    (statistic, probability)
}

/// The Kolmogorov distance of two histograms of counts and its probability.
fn kolmogorov(a: &[u64], b: &[u64]) -> (f64, f64) {
    let (n1, n2) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let (mut f1, mut f2, mut distance) = (0.0, 0.0, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        f1 += x as f64 / n1;
        f2 += y as f64 / n2;
        distance = distance.max((f1 - f2).abs());
    }
    let z = distance * (n1 * n2 / (n1 + n2)).sqrt();
    (distance, kolmogorov_probability(z))
}

/// The probability that the Kolmogorov statistic exceeds `z` (the asymptotic series).
fn kolmogorov_probability(z: f64) -> f64 {
    if z < 0.2 {
        return 1.0;
    }
    let sum: f64 = (1..=100)
        .map(|j| {
            let j = f64::from(j);
            let sign = if j % 2.0 == 1.0 { 1.0 } else { -1.0 };
            sign * (-2.0 * j * j * z * z).exp()
        })
        .sum();
    (2.0 * sum).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Axis;

    /// A histogram of `n` values spread as a triangle around `centre`.
    fn peaked(n: u64, centre: f64) -> Hist1 {
        let mut h = Hist1::new("h", "t", Axis::new("x", "", 50, 0.0, 100.0)).unwrap();
        for i in 0..n {
            // A deterministic spread: the sum of two uniform steps.
            let u = (i * 7919 % 1000) as f64 / 1000.0;
            let v = (i * 104_729 % 997) as f64 / 997.0;
            h.fill(centre + 10.0 * (u + v - 1.0));
        }
        h
    }

    #[test]
    fn the_same_shape_is_good_and_a_shifted_one_bad_by_either_test() {
        for test in [Test::Chi2, Test::Kolmogorov] {
            let check = Check {
                test,
                ..Check::default()
            };
            let same = compare(&peaked(5000, 50.0), &peaked(20_000, 50.0), &check).unwrap();
            assert_eq!(same.quality, Quality::Good, "{test:?}: {same:?}");
            let shifted = compare(&peaked(5000, 56.0), &peaked(20_000, 50.0), &check).unwrap();
            assert_eq!(shifted.quality, Quality::Bad, "{test:?}: {shifted:?}");
        }
    }

    fn counts(at: &[(usize, u64)]) -> Hist1 {
        let mut h = Hist1::new("m", "t", Axis::new("e-link", "", 8, 0.0, 8.0))
            .unwrap()
            .of_counts();
        for &(bin, n) in at {
            for _ in 0..n {
                h.fill(bin as f64);
            }
        }
        h
    }

    #[test]
    fn rare_counts_are_judged_by_the_references_rate() {
        let check = Check::default();
        let clean = counts(&[]);
        let dead = compare_counts(&counts(&[(3, 800)]), 1000, &clean, 1000, &check).unwrap();
        assert_eq!(dead.quality, Quality::Bad, "{dead:?}");
        assert!(dead.why.starts_with("e-link 3: 800"), "{}", dead.why);
        let once = compare_counts(&counts(&[(5, 1)]), 1000, &clean, 1000, &check).unwrap();
        assert_eq!(
            once.quality,
            Quality::Good,
            "one occurrence is no alarm: {once:?}"
        );
        // As often as in the reference (per event): Good.
        let usual = compare_counts(&counts(&[(2, 20)]), 1000, &counts(&[(2, 40)]), 2000, &check);
        assert_eq!(usual.unwrap().quality, Quality::Good);
        let short = compare_counts(&counts(&[(3, 80)]), 50, &clean, 1000, &check).unwrap();
        assert_eq!(short.quality, Quality::Undetermined);
    }

    #[test]
    fn too_few_entries_are_undetermined() {
        let check = Check::default();
        let v = compare(&peaked(50, 50.0), &peaked(5000, 80.0), &check).unwrap();
        assert_eq!(v.quality, Quality::Undetermined);
        assert!(v.why.contains("fewer than 100"), "{}", v.why);
    }

    #[test]
    fn a_shift_out_of_range_counts() {
        let check = Check::default();
        let v = compare(&peaked(5000, 150.0), &peaked(5000, 50.0), &check).unwrap();
        assert_eq!(v.quality, Quality::Bad, "{v:?}");
    }

    #[test]
    fn different_binnings_are_not_compared() {
        let other = Hist1::new("o", "t", Axis::new("x", "", 10, 0.0, 100.0)).unwrap();
        assert!(compare(&peaked(500, 50.0), &other, &Check::default()).is_err());
    }

    /// The chi2 statistic of identical shapes is 0 with probability 1; ROOT's Kolmogorov
    /// probability at z = 1 is 0.27.
    #[test]
    fn the_statistics_match_their_known_values() {
        let (s, p) = chi2(&[10, 20, 30], &[20, 40, 60]);
        assert!(s.abs() < 1e-12 && (p - 1.0).abs() < 1e-12, "{s} {p}");
        assert!((kolmogorov_probability(1.0) - 0.269_999_7).abs() < 1e-6);
    }
}

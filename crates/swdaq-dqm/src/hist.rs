//! One-dimensional histograms of counts with fixed binning, as a shifter reads them: a name,
//! a title, the axis's quantity and unit, and under- and overflow kept (a value out of range
//! is still counted, and a shift out of range still shows).

use serde::{Deserialize, Serialize};

/// `bins` equal bins from `lo` to `hi` of a quantity in `unit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    pub label: String,
    pub unit: String,
    pub bins: usize,
    pub lo: f64,
    pub hi: f64,
}

impl Axis {
    pub fn new(label: &str, unit: &str, bins: usize, lo: f64, hi: f64) -> Axis {
        Axis {
            label: label.to_owned(),
            unit: unit.to_owned(),
            bins,
            lo,
            hi,
        }
    }

    /// The bin `x` falls in, counting the underflow as 0 and the overflow as `bins + 1`.
    fn slot(&self, x: f64) -> usize {
        if x.is_nan() || x < self.lo {
            0
        } else if x >= self.hi {
            self.bins + 1
        } else {
            let width = (self.hi - self.lo) / self.bins as f64;
            // Rounding may put a value just below `hi` one past the last bin.
            1 + (((x - self.lo) / width) as usize).min(self.bins - 1)
        }
    }

    /// The axis's low edge when its edges are whole numbers and each bin one unit wide (an
    /// ADC axis in counts): then a whole number's bin is found by a subtraction alone.
    fn unit_bins_from(&self) -> Option<i64> {
        let whole = |x: f64| x.fract() == 0.0 && x.abs() < 2f64.powi(52);
        (whole(self.lo) && whole(self.hi) && self.hi - self.lo == self.bins as f64)
            .then_some(self.lo as i64)
    }

    /// The centre of bin `i` (from 0).
    pub fn centre(&self, i: usize) -> f64 {
        self.lo + (i as f64 + 0.5) * (self.hi - self.lo) / self.bins as f64
    }
}

/// Histograms that cannot be added or compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistError {
    #[error("histogram {name}: {bins} bins from {lo} to {hi} is no axis")]
    BadAxis {
        name: String,
        bins: usize,
        lo: f64,
        hi: f64,
    },
    #[error("histograms {0} and {1} have different binnings")]
    Binning(String, String),
}

/// What a histogram's entries are, which decides how it is judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistKind {
    /// One entry per item (a size per fragment): its shape is compared.
    #[default]
    Distribution,
    /// Occurrences of something that should be rare (a missing e-link by index): each
    /// bin's count is compared with the reference's rate per event.
    Counts,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hist1 {
    /// Unique within a run's set: how a reference's histogram is found.
    pub name: String,
    pub title: String,
    #[serde(default)]
    pub kind: HistKind,
    pub axis: Axis,
    /// Slot 0 is the underflow, `bins + 1` the overflow.
    pub counts: Vec<u64>,
}

impl Hist1 {
    pub fn new(name: &str, title: &str, axis: Axis) -> Result<Hist1, HistError> {
        let finite = axis.lo.is_finite() && axis.hi.is_finite();
        if axis.bins == 0 || !finite || axis.lo >= axis.hi {
            return Err(HistError::BadAxis {
                name: name.to_owned(),
                bins: axis.bins,
                lo: axis.lo,
                hi: axis.hi,
            });
        }
        Ok(Hist1 {
            name: name.to_owned(),
            title: title.to_owned(),
            kind: HistKind::Distribution,
            counts: vec![0; axis.bins + 2],
            axis,
        })
    }

    /// The same histogram holding counts of rare occurrences ([`HistKind::Counts`]).
    pub fn of_counts(self) -> Hist1 {
        Hist1 {
            kind: HistKind::Counts,
            ..self
        }
    }

    pub fn fill(&mut self, x: f64) {
        self.counts[self.axis.slot(x)] += 1;
    }

    /// Fills the whole numbers `first`, `first + 1`, ... `counts[i]` times each: what as
    /// many `fill`s do, without a division per value where the axis has unit bins (online
    /// monitoring counts a channel's ADCs by value first, then fills tens of values, not
    /// thousands of samples).
    pub fn fill_counted(&mut self, first: i64, counts: &[u32]) {
        let unit_bins_from = self.axis.unit_bins_from();
        for (value, &count) in (first..).zip(counts) {
            let slot = match unit_bins_from {
                // Slot 0 is the underflow, `bins + 1` the overflow, as `Axis::slot` counts.
                Some(lo) => (value - lo + 1).clamp(0, self.axis.bins as i64 + 1) as usize,
                None => self.axis.slot(value as f64),
            };
            self.counts[slot] += u64::from(count);
        }
    }

    /// Everything filled, under- and overflow included.
    pub fn entries(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn underflow(&self) -> u64 {
        self.counts[0]
    }

    pub fn overflow(&self) -> u64 {
        self.counts[self.axis.bins + 1]
    }

    /// The in-range bins' counts.
    pub fn bins(&self) -> &[u64] {
        &self.counts[1..=self.axis.bins]
    }

    /// Mean and standard deviation of the in-range entries, from the bin centres.
    pub fn mean_and_rms(&self) -> Option<(f64, f64)> {
        let n: u64 = self.bins().iter().sum();
        if n == 0 {
            return None;
        }
        let centres = (0..self.axis.bins).map(|i| self.axis.centre(i));
        let (mut sum, mut sum2) = (0.0, 0.0);
        for (c, &k) in centres.zip(self.bins()) {
            sum += c * k as f64;
            sum2 += c * c * k as f64;
        }
        let mean = sum / n as f64;
        Some((mean, (sum2 / n as f64 - mean * mean).max(0.0).sqrt()))
    }

    /// Adds `other`'s counts (the same histogram from another file or process).
    pub fn merge(&mut self, other: &Hist1) -> Result<(), HistError> {
        self.same_binning(other)?;
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        Ok(())
    }

    pub fn same_binning(&self, other: &Hist1) -> Result<(), HistError> {
        let (a, b) = (&self.axis, &other.axis);
        if (a.bins, a.lo, a.hi) == (b.bins, b.lo, b.hi) && self.counts.len() == other.counts.len() {
            Ok(())
        } else {
            Err(HistError::Binning(self.name.clone(), other.name.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hist() -> Hist1 {
        Hist1::new("h", "t", Axis::new("size", "B", 10, 0.0, 100.0)).unwrap()
    }

    #[test]
    fn values_land_in_their_bins_and_out_of_range_ones_are_kept() {
        let mut h = hist();
        for x in [-1.0, 0.0, 9.99, 10.0, 99.999, 100.0, 1e9, f64::NAN] {
            h.fill(x);
        }
        assert_eq!(h.underflow(), 2, "below the range and NaN");
        assert_eq!(h.overflow(), 2);
        assert_eq!(h.bins()[0], 2);
        assert_eq!(h.bins()[1], 1);
        assert_eq!(h.bins()[9], 1);
        assert_eq!(h.entries(), 8);
    }

    #[test]
    fn an_empty_or_reversed_axis_is_refused() {
        assert!(Hist1::new("h", "t", Axis::new("x", "", 0, 0.0, 1.0)).is_err());
        assert!(Hist1::new("h", "t", Axis::new("x", "", 5, 1.0, 1.0)).is_err());
        assert!(Hist1::new("h", "t", Axis::new("x", "", 5, 0.0, f64::INFINITY)).is_err());
    }

    #[test]
    fn merging_needs_the_same_binning() {
        let mut a = hist();
        let b = Hist1::new("b", "t", Axis::new("size", "B", 20, 0.0, 100.0)).unwrap();
        assert!(a.merge(&b).is_err());
        let mut c = hist();
        c.fill(5.0);
        a.merge(&c).unwrap();
        a.merge(&c).unwrap();
        assert_eq!(a.bins()[0], 2);
    }

    proptest! {
        /// Every value is counted exactly once, wherever it falls.
        #[test]
        fn every_fill_is_counted_once(values in proptest::collection::vec(any::<f64>(), 0..200)) {
            let mut h = hist();
            for &x in &values {
                h.fill(x);
            }
            prop_assert_eq!(h.entries(), values.len() as u64);
        }

        /// Filling counted whole numbers counts what filling each of them does, on axes
        /// with unit bins (the fast path) and on any other axis.
        #[test]
        fn filling_counted_values_is_filling_each(
            first in -3000i64..3000,
            counts in proptest::collection::vec(0u32..5, 0..300),
            lo in -300i32..300,
            bins in 1usize..600,
            unit in any::<bool>(),
        ) {
            let hi = if unit { f64::from(lo) + bins as f64 } else { f64::from(lo) + bins as f64 * 1.5 };
            let axis = Axis::new("ADC", "ADC", bins, f64::from(lo), hi);
            let mut counted = Hist1::new("a", "t", axis.clone()).unwrap();
            let mut each = Hist1::new("b", "t", axis).unwrap();
            counted.fill_counted(first, &counts);
            for (value, &count) in (first..).zip(&counts) {
                for _ in 0..count {
                    each.fill(value as f64);
                }
            }
            prop_assert_eq!(counted.counts, each.counts);
        }
    }

    #[test]
    fn filling_counted_values_keeps_the_edges() {
        let mut h = Hist1::new("h", "t", Axis::new("ADC", "ADC", 4, -2.0, 2.0)).unwrap();
        // -3 .. 3, each twice: two under, eight in range, four over.
        h.fill_counted(-3, &[2; 7]);
        assert_eq!(
            (h.underflow(), h.bins(), h.overflow()),
            (2, &[2, 2, 2, 2][..], 4)
        );
    }
}

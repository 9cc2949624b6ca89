//! Front-end amplifier response: a unipolar pulse `(t/tp)^4 exp(4 (1 - t/tp))` peaking at
//! 1 when `t = tp` (collection), and its derivative, scaled to a peak of 1, for the bipolar
//! induction signal (equal positive and negative lobes).

/// Shape order: CR-RC^4-like.
const ORDER: f64 = 4.0;
/// Beyond this many peaking times a pulse has decayed below 1e-3 of its peak.
pub const LENGTH_IN_PEAKING_TIMES: f64 = 6.0;

/// Unipolar shape at `x = t / tp` (0 before the pulse starts).
pub fn unipolar(x: f64) -> f64 {
    if x <= 0.0 {
        0.0
    } else {
        x.powf(ORDER) * (ORDER * (1.0 - x)).exp()
    }
}

/// Where the bipolar shape's positive lobe peaks, in peaking times: `1 - 1/sqrt(order)`.
pub const BIPOLAR_PEAK: f64 = 0.5;
const _: () =
    assert!(BIPOLAR_PEAK * BIPOLAR_PEAK == (1.0 - 1.0 / 2.0) * (1.0 - 1.0 / 2.0) && ORDER == 4.0);

/// Bipolar shape: minus the derivative of [`unipolar`], normalised to a maximum of 1.
/// Positive lobe first (as the drifting charge approaches the wire), then negative.
pub fn bipolar(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    // d/dx of x^n e^{n(1-x)} = n x^{n-1} e^{n(1-x)} (1 - x); its maximum is at x = 1 - 1/sqrt(n).
    let derivative = |x: f64| ORDER * x.powf(ORDER - 1.0) * (ORDER * (1.0 - x)).exp() * (1.0 - x);
    derivative(x) / derivative(BIPOLAR_PEAK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unipolar_peaks_at_one_and_bipolar_has_zero_area() {
        assert!((unipolar(1.0) - 1.0).abs() < 1e-12);
        assert!(unipolar(0.99) < 1.0 && unipolar(1.01) < 1.0);
        let area: f64 = (1..60_000).map(|i| bipolar(i as f64 * 1e-4) * 1e-4).sum();
        assert!(area.abs() < 1e-3, "bipolar area {area}");
        let max = (1..60_000)
            .map(|i| bipolar(i as f64 * 1e-4))
            .fold(f64::MIN, f64::max);
        assert!((max - 1.0).abs() < 1e-6);
        assert!(unipolar(LENGTH_IN_PEAKING_TIMES) < 1e-3);
    }
}

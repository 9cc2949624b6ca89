//! Standard normal deviates, two per 64-bit random word: the white noise draws one per
//! sample, so this is the emulator's hot loop.
//!
//! Marsaglia & Tsang's ziggurat ("The Ziggurat Method for Generating Random Variables",
//! J. Stat. Softw. 5, 2000) with 128 layers on 32-bit halves: 7 bits pick the layer, 25
//! bits the signed position in it (so no bit serves both, unlike the original). The fast
//! path (98.8%) is a compare and a multiply; the wedges and the tail beyond 3.44 are
//! sampled exactly, so the distribution is exact to the 2^-24 resolution of the position.

use rand::{Rng, RngCore};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::sync::LazyLock;

const LAYERS: usize = 128;
/// Start of the tail (right edge of the base layer) and the area of every layer.
const TAIL_START: f64 = 3.442619855899;
const LAYER_AREA: f64 = 9.91256303526217e-3;
/// Scale of the 25-bit signed position: |position| < 2^24.
const POSITION_SCALE: f64 = (1u32 << 24) as f64;

struct Tables {
    /// |position| below this lies inside the layer's rectangle under the curve: accept.
    accept_below: [u32; LAYERS],
    /// Position to x.
    width: [f64; LAYERS],
    /// exp(-x^2/2) at the layer's right edge.
    density: [f64; LAYERS],
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| {
    let mut t = Tables {
        accept_below: [0; LAYERS],
        width: [0.0; LAYERS],
        density: [0.0; LAYERS],
    };
    let mut edge = TAIL_START;
    let mut previous_edge = edge;
    let q = LAYER_AREA / (-0.5 * edge * edge).exp();
    t.accept_below[0] = (edge / q * POSITION_SCALE) as u32;
    t.width[0] = q / POSITION_SCALE;
    t.width[LAYERS - 1] = edge / POSITION_SCALE;
    t.density[0] = 1.0;
    t.density[LAYERS - 1] = (-0.5 * edge * edge).exp();
    for i in (1..LAYERS - 1).rev() {
        edge = (-2.0 * (LAYER_AREA / edge + (-0.5 * edge * edge).exp()).ln()).sqrt();
        t.accept_below[i + 1] = (edge / previous_edge * POSITION_SCALE) as u32;
        previous_edge = edge;
        t.density[i] = (-0.5 * edge * edge).exp();
        t.width[i] = edge / POSITION_SCALE;
    }
    t.accept_below[1] = 0;
    t
});

/// Fills `out` with independent standard normal deviates.
pub fn fill_standard_normal(rng: &mut Xoshiro256PlusPlus, out: &mut [f64]) {
    let t = &*TABLES;
    let mut pairs = out.chunks_exact_mut(2);
    for pair in &mut pairs {
        let word = rng.next_u64();
        pair[0] = from_bits(t, word as u32, rng);
        pair[1] = from_bits(t, (word >> 32) as u32, rng);
    }
    for v in pairs.into_remainder() {
        *v = from_bits(t, rng.next_u32(), rng);
    }
}

/// One deviate from 32 random bits: the low 7 pick the layer, the high 25 the position.
#[inline(always)]
fn from_bits(t: &Tables, bits: u32, rng: &mut Xoshiro256PlusPlus) -> f64 {
    let layer = (bits & 0x7f) as usize;
    let position = (bits as i32) >> 7;
    if position.unsigned_abs() < t.accept_below[layer] {
        position as f64 * t.width[layer]
    } else {
        outside_rectangle(t, layer, position, rng)
    }
}

/// The slow path: the tail, or a wedge between a layer's rectangle and the curve.
#[cold]
fn outside_rectangle(
    t: &Tables,
    mut layer: usize,
    mut position: i32,
    rng: &mut Xoshiro256PlusPlus,
) -> f64 {
    loop {
        let x = position as f64 * t.width[layer];
        if layer == 0 {
            // Marsaglia's tail method: exact beyond TAIL_START.
            let tail = loop {
                let tail = -open_unit(rng).ln() / TAIL_START;
                let y = -open_unit(rng).ln();
                if 2.0 * y >= tail * tail {
                    break tail;
                }
            };
            return if position >= 0 {
                TAIL_START + tail
            } else {
                -TAIL_START - tail
            };
        }
        let curve_at =
            t.density[layer] + rng.random::<f64>() * (t.density[layer - 1] - t.density[layer]);
        if curve_at < (-0.5 * x * x).exp() {
            return x;
        }
        let bits = rng.next_u32();
        layer = (bits & 0x7f) as usize;
        position = (bits as i32) >> 7;
        if position.unsigned_abs() < t.accept_below[layer] {
            return position as f64 * t.width[layer];
        }
    }
}

/// Uniform in (0, 1]: safe to take the logarithm of.
fn open_unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    1.0 - rng.random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Histogram of 2^24 deviates against the normal density integrated over each bin:
    /// a chi-square test that catches a wrong layer, wedge or tail.
    #[test]
    fn deviates_follow_the_standard_normal_distribution() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
        let mut buf = vec![0.0; 1 << 16];
        let (bins, lo, hi) = (240usize, -6.0, 6.0);
        let width = (hi - lo) / bins as f64;
        let mut counts = vec![0u64; bins + 2];
        let (mut sum, mut sum2, mut n, mut beyond_4) = (0.0, 0.0, 0.0, 0u64);
        for _ in 0..256 {
            fill_standard_normal(&mut rng, &mut buf);
            for &x in &buf {
                sum += x;
                sum2 += x * x;
                n += 1.0;
                beyond_4 += (x.abs() >= 4.0) as u64;
                let bin = ((x - lo) / width).floor();
                counts[if bin < 0.0 {
                    bins
                } else if bin >= bins as f64 {
                    bins + 1
                } else {
                    bin as usize
                }] += 1;
            }
        }
        assert!((sum / n).abs() < 1e-3 && (sum2 / n - 1.0).abs() < 2e-3);
        let density = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let mut chi2 = 0.0;
        let mut dof = 0;
        for (b, &count) in counts[..bins].iter().enumerate() {
            let a = lo + b as f64 * width;
            // Simpson's rule is exact far beyond the counts' precision at this bin width.
            let p =
                width / 6.0 * (density(a) + 4.0 * density(a + width / 2.0) + density(a + width));
            let expected = p * n;
            if expected > 20.0 {
                chi2 += (count as f64 - expected).powi(2) / expected;
                dof += 1;
            }
        }
        let limit = dof as f64 + 5.0 * (2.0 * dof as f64).sqrt();
        assert!(chi2 < limit, "chi2 {chi2} for {dof} bins");
        // Beyond the ziggurat's base (3.44 sigma) the tail method takes over.
        let expected = 6.334e-5 * n;
        assert!(
            (beyond_4 as f64 / expected - 1.0).abs() < 0.12,
            "{beyond_4} beyond 4 sigma, expected {expected}"
        );
    }
}

//! The scalar reference of every stage, one lane at a time in the plainest form; the AVX2
//! twins must reproduce it bit for bit.

use super::{
    AbsRunSumParams, Kernel, ProtoDuneParams, Q25, Q75, StageOutput, StageState, saturate,
};
use crate::config::MAX_FIR_TAPS;

/// One step of a frugal-streaming quantile tracker: the accumulator moves `up` when `x` is
/// above the estimate, `-down` when below; once strictly beyond +/-`limit` the estimate moves
/// by 1 that way and the accumulator restarts. Returns the updated estimate. With weights
/// (1, 1) it is the median pedestal; estimates never leave the samples' range.
#[inline]
pub fn frugal_step(
    estimate: &mut i16,
    acc: &mut i16,
    x: i16,
    up: i16,
    down: i16,
    limit: i16,
) -> i16 {
    if x > *estimate {
        *acc += up;
    } else if x < *estimate {
        *acc -= down;
    }
    if *acc > limit {
        *estimate += 1;
        *acc = 0;
    } else if *acc < -limit {
        *estimate -= 1;
        *acc = 0;
    }
    *estimate
}

/// Runs lane `l`'s stages on its pedestal-subtracted sample `signal`.
#[inline]
pub fn step(
    kernel: &Kernel,
    st: &mut StageState,
    l: usize,
    signal: i16,
    limit: i16,
) -> StageOutput {
    match kernel {
        Kernel::ProtoDune(p) => protodune(p, st, l, signal, limit),
        Kernel::AbsRunSum(p) => abs_run_sum(p, st, l, signal),
    }
}

/// FIR, then quartiles of the filtered signal, then `fine > max(iqr x mult, min)`.
fn protodune(
    p: &ProtoDuneParams,
    st: &mut StageState,
    l: usize,
    signal: i16,
    limit: i16,
) -> StageOutput {
    // Exact: |signal| <= 2^14 and the taps' magnitudes sum to at most 2^15.
    let mut fir = p.taps[0] as i32 * signal as i32;
    for k in 1..MAX_FIR_TAPS {
        fir += p.taps[k] as i32 * st.history[k - 1][l] as i32;
    }
    for k in (1..MAX_FIR_TAPS - 1).rev() {
        st.history[k][l] = st.history[k - 1][l];
    }
    st.history[0][l] = signal;
    let (filtered, fine) = (saturate(fir >> p.shift), saturate(fir >> p.fine_shift));
    let q25 = frugal_step(
        &mut st.q25[l],
        &mut st.q25_acc[l],
        fine,
        Q25.0,
        Q25.1,
        limit,
    );
    let q75 = frugal_step(
        &mut st.q75[l],
        &mut st.q75_acc[l],
        fine,
        Q75.0,
        Q75.1,
        limit,
    );
    let iqr = q75.saturating_sub(q25).max(0);
    let threshold = saturate((iqr as i32 * p.mult_q8 as i32) >> 8).max(p.min_threshold);
    StageOutput {
        value: filtered,
        over: fine > threshold,
        clipped: fine == i16::MAX,
    }
}

/// `_mm256_mulhrs_epi16`: `(a * b + 2^14) >> 15`, truncated to 16 bits.
fn mulhrs(a: i16, b: i16) -> i16 {
    ((a as i32 * b as i32 + (1 << 14)) >> 15) as i16
}

/// `RS = R * (RS / Dm) + S * (|s| / Ds)`, the sum of products exact and saturated once
/// (tpglibs' 16-bit products can wrap).
fn abs_run_sum(p: &AbsRunSumParams, st: &mut StageState, l: usize, signal: i16) -> StageOutput {
    let kept = mulhrs(st.run_sum[l], p.memory_q15) as i32 * p.memory_factor as i32;
    let added = mulhrs(signal.wrapping_abs(), p.scale_q15) as i32 * p.scale_factor as i32;
    let rs = saturate(kept + added);
    st.run_sum[l] = rs;
    StageOutput {
        value: rs,
        over: rs > p.threshold,
        clipped: rs == i16::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_sum_matches_tpglibs_unit_test() {
        // tpglibs' test: R = 8, S = 5 (of 10), inputs 100, -180, 80 give 50, 130, 144.
        let q = i16::MAX / 10;
        let p = AbsRunSumParams {
            threshold: 1,
            memory_q15: q,
            memory_factor: 8,
            scale_q15: q,
            scale_factor: 5,
        };
        let mut st = StageState::default();
        let got: Vec<i16> = [100, -180, 80]
            .into_iter()
            .map(|s| abs_run_sum(&p, &mut st, 0, s).value)
            .collect();
        assert_eq!(got, [50, 130, 144]);
    }

    #[test]
    fn quartile_trackers_settle_at_the_quartiles() {
        let (mut q25, mut a25, mut q75, mut a75) = (0i16, 0i16, 0i16, 0i16);
        let mut x: u32 = 1;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let v = ((x >> 16) % 101) as i16; // uniform 0..=100
            frugal_step(&mut q25, &mut a25, v, Q25.0, Q25.1, 10);
            frugal_step(&mut q75, &mut a75, v, Q75.0, Q75.1, 10);
        }
        assert!((20..=30).contains(&q25), "q25 {q25}");
        assert!((70..=80).contains(&q75), "q75 {q75}");
    }
}

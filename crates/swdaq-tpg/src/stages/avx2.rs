//! AVX2 twins of the scalar stages: 16 lanes per register, the same integer arithmetic (the
//! same compares, the same exact i32 sums saturated the same way), so TPs are bit-identical.
//! A group's state stays in registers for all the samples of a WIBEth frame (`protodune`'s
//! for each of its passes).

use super::{
    AbsRunSumParams, Kernel, MAX_SAMPLES, PAIR_ROWS, ProtoDuneParams, Q25, Q75, StageState,
};
use crate::config::MAX_FIR_TAPS;
use crate::finder::{HitFinder, LANES};
use crate::simd::{FrugalLimits, HitLanes, hit_lanes, load, store, unpack_group};
use std::arch::x86_64::*;
use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth::{self, WibEthFrame};

const HISTORY: usize = MAX_FIR_TAPS - 1;

/// Two i16 values as the (low, high) halves of every i32 lane, for `_mm256_madd_epi16`.
#[target_feature(enable = "avx2")]
#[inline]
fn pair(low: i16, high: i16) -> __m256i {
    _mm256_set1_epi32((low as u16 as i32) | ((high as i32) << 16))
}

/// Saturates the i32 lanes of `lo` (lanes 0-3, 8-11) and `hi` (4-7, 12-15) to i16 after an
/// arithmetic shift; unpack and pack both work per 128-bit half, so lane order is restored.
#[target_feature(enable = "avx2")]
#[inline]
fn shift_pack(lo: __m256i, hi: __m256i, shift: __m128i) -> __m256i {
    _mm256_packs_epi32(_mm256_sra_epi32(lo, shift), _mm256_sra_epi32(hi, shift))
}

/// The frugal quantile step with weights (`up`, `down`) (`scalar::frugal_step`).
#[target_feature(enable = "avx2")]
#[inline]
fn quantile(
    frugal: &FrugalLimits,
    (up, down): (i16, i16),
    estimate: __m256i,
    acc: __m256i,
    x: __m256i,
) -> (__m256i, __m256i) {
    let above = _mm256_and_si256(_mm256_cmpgt_epi16(x, estimate), _mm256_set1_epi16(up));
    let below = _mm256_and_si256(_mm256_cmpgt_epi16(estimate, x), _mm256_set1_epi16(down));
    frugal.settle(
        estimate,
        _mm256_sub_epi16(_mm256_add_epi16(acc, above), below),
    )
}

/// Where masked lanes (-1 in `masked`) keep `old`.
#[target_feature(enable = "avx2")]
#[inline]
fn keep_masked(new: __m256i, old: __m256i, masked: __m256i) -> __m256i {
    _mm256_blendv_epi8(new, old, masked)
}

/// What every kernel's loop needs about its group.
struct GroupRun {
    g: usize,
    masked: __m256i,
    any_masked: bool,
    frugal: FrugalLimits,
    t0: u64,
    ticks_per_sample: u64,
    delay_ticks: u64,
}

impl GroupRun {
    /// Hands sample `s`'s lanes that are over threshold or inside a hit to TP assembly;
    /// `rest` (value to integrate, raw ADCs, clipped lanes) is only computed for them.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn hits(
        &self,
        f: &mut HitFinder,
        s: usize,
        over: __m256i,
        rest: impl Fn() -> (__m256i, __m256i, __m256i),
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let over = _mm256_andnot_si256(self.masked, over);
        let open = load(&f.hits.open[self.g * LANES..(self.g + 1) * LANES]);
        let busy = _mm256_movemask_epi8(_mm256_or_si256(over, open)) as u32;
        if busy != 0 {
            let ts = (self.t0 + s as u64 * self.ticks_per_sample).saturating_sub(self.delay_ticks);
            let (value, x, clipped) = rest();
            let lanes = HitLanes {
                value,
                x,
                over,
                clipped,
            };
            hit_lanes(f, self.g, busy, &lanes, ts, out);
        }
    }
}

/// `protodune` in three passes over the samples, each with few enough live values to stay
/// in registers: pedestal, FIR, then noise, threshold and hits. The passes hand over through
/// the finder's scratch rows, which stay in L1 (taken out of the finder meanwhile, so TP
/// assembly can borrow it).
#[target_feature(enable = "avx2")]
#[inline]
fn run_protodune(
    f: &mut HitFinder,
    r: &GroupRun,
    p: &ProtoDuneParams,
    n: usize,
    input: impl Fn(usize) -> __m256i,
    out: &mut Vec<TriggerPrimitive>,
) {
    let (g, zero) = (r.g, _mm256_setzero_si256());
    let lanes = g * LANES..(g + 1) * LANES;

    // Pass 1: median pedestal. `pairs[HISTORY - 1 + s]` interleaves sample s's signal with
    // the one before (low and high 128-bit halves' unpacks), ready for the FIR's madds.
    let mut scratch = std::mem::take(&mut f.scratch);
    let (pairs_lo, rest) = scratch.split_at_mut(PAIR_ROWS);
    let (pairs_hi, rest) = rest.split_at_mut(PAIR_ROWS);
    let (signals, fine) = rest.split_at_mut(MAX_SAMPLES);
    let old_history: [__m256i; HISTORY] = std::array::from_fn(|k| load(&f.stages[g].history[k]));
    let mut previous = old_history[HISTORY - 1];
    for k in (0..HISTORY - 1).rev() {
        let j = HISTORY - 2 - k;
        store(
            &mut pairs_lo[j].0,
            _mm256_unpacklo_epi16(old_history[k], previous),
        );
        store(
            &mut pairs_hi[j].0,
            _mm256_unpackhi_epi16(old_history[k], previous),
        );
        previous = old_history[k];
    }
    let (mut pedestal, mut accumulator) = (
        load(&f.pedestal[lanes.clone()]),
        load(&f.accumulator[lanes.clone()]),
    );
    for s in 0..n {
        let x = input(s);
        let (ped, acc) = r.frugal.median(pedestal, accumulator, x);
        (pedestal, accumulator) = if r.any_masked {
            (
                keep_masked(ped, pedestal, r.masked),
                keep_masked(acc, accumulator, r.masked),
            )
        } else {
            (ped, acc)
        };
        let signal = _mm256_sub_epi16(x, pedestal);
        store(&mut signals[s].0, signal);
        store(
            &mut pairs_lo[HISTORY - 1 + s].0,
            _mm256_unpacklo_epi16(signal, previous),
        );
        store(
            &mut pairs_hi[HISTORY - 1 + s].0,
            _mm256_unpackhi_epi16(signal, previous),
        );
        previous = signal;
    }
    store(&mut f.pedestal[lanes.clone()], pedestal);
    store(&mut f.accumulator[lanes], accumulator);
    // The newest HISTORY signals, from this call and (if it was shorter) the previous ones.
    let history: [__m256i; HISTORY] = std::array::from_fn(|k| {
        let new = if k < n {
            load(&signals[n - 1 - k].0)
        } else {
            old_history[k - n]
        };
        if r.any_masked {
            keep_masked(new, old_history[k], r.masked)
        } else {
            new
        }
    });
    for (k, h) in history.iter().enumerate() {
        store(&mut f.stages[g].history[k], *h);
    }

    // Pass 2: the FIR, exact in i32 (tap pairs times signal pairs), kept as the fine signal.
    // The filtered signal in ADC counts is only needed inside hits: recomputed there.
    let taps: [__m256i; MAX_FIR_TAPS / 2] =
        std::array::from_fn(|k| pair(p.taps[2 * k], p.taps[2 * k + 1]));
    let fir = |s: usize, shift: __m128i| {
        let j = HISTORY - 1 + s;
        let (mut lo, mut hi) = (zero, zero);
        for (k, t) in taps.iter().enumerate() {
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(load(&pairs_lo[j - 2 * k].0), *t));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(load(&pairs_hi[j - 2 * k].0), *t));
        }
        shift_pack(lo, hi, shift)
    };
    let (shift, fine_shift) = (
        _mm_cvtsi32_si128(p.shift as i32),
        _mm_cvtsi32_si128(p.fine_shift as i32),
    );
    for (s, v) in fine.iter_mut().enumerate().take(n) {
        store(&mut v.0, fir(s, fine_shift));
    }

    // Pass 3: quartiles of the fine signal, threshold = max(sat16(iqr x mult >> 8), min)
    // with the product exact in i32, and hits.
    let st: &StageState = &f.stages[g];
    let (mut q25, mut q25_acc) = (load(&st.q25), load(&st.q25_acc));
    let (mut q75, mut q75_acc) = (load(&st.q75), load(&st.q75_acc));
    let mult = pair(p.mult_q8, 0);
    let min_threshold = _mm256_set1_epi16(p.min_threshold);
    let (top, q8) = (_mm256_set1_epi16(i16::MAX), _mm_cvtsi32_si128(8));
    for (s, x) in fine.iter().enumerate().take(n) {
        let x = load(&x.0);
        let (e25, a25) = quantile(&r.frugal, Q25, q25, q25_acc, x);
        let (e75, a75) = quantile(&r.frugal, Q75, q75, q75_acc, x);
        if r.any_masked {
            q25 = keep_masked(e25, q25, r.masked);
            q25_acc = keep_masked(a25, q25_acc, r.masked);
            q75 = keep_masked(e75, q75, r.masked);
            q75_acc = keep_masked(a75, q75_acc, r.masked);
        } else {
            (q25, q25_acc, q75, q75_acc) = (e25, a25, e75, a75);
        }
        let iqr = _mm256_max_epi16(_mm256_subs_epi16(q75, q25), zero);
        let scaled = |half| _mm256_madd_epi16(half, mult);
        let threshold = _mm256_max_epi16(
            shift_pack(
                scaled(_mm256_unpacklo_epi16(iqr, zero)),
                scaled(_mm256_unpackhi_epi16(iqr, zero)),
                q8,
            ),
            min_threshold,
        );
        let over = _mm256_cmpgt_epi16(x, threshold);
        let rest = || (fir(s, shift), input(s), _mm256_cmpeq_epi16(x, top));
        r.hits(f, s, over, rest, out);
    }
    let st: &mut StageState = &mut f.stages[g];
    store(&mut st.q25, q25);
    store(&mut st.q25_acc, q25_acc);
    store(&mut st.q75, q75);
    store(&mut st.q75_acc, q75_acc);
    f.scratch = scratch;
}

/// `abs-running-sum`: pedestal and running sum in one pass (few live values).
#[target_feature(enable = "avx2")]
#[inline]
fn run_abs_run_sum(
    f: &mut HitFinder,
    r: &GroupRun,
    p: &AbsRunSumParams,
    n: usize,
    input: impl Fn(usize) -> __m256i,
    out: &mut Vec<TriggerPrimitive>,
) {
    let lanes = r.g * LANES..(r.g + 1) * LANES;
    let threshold = _mm256_set1_epi16(p.threshold);
    let (memory_q15, scale_q15) = (
        _mm256_set1_epi16(p.memory_q15),
        _mm256_set1_epi16(p.scale_q15),
    );
    // (kept, added) pairs times (R, S), summed exactly in i32 by madd.
    let factors = pair(p.memory_factor, p.scale_factor);
    let top = _mm256_set1_epi16(i16::MAX);
    let (mut pedestal, mut accumulator) = (
        load(&f.pedestal[lanes.clone()]),
        load(&f.accumulator[lanes.clone()]),
    );
    let mut run_sum = load(&f.stages[r.g].run_sum);
    for s in 0..n {
        let x = input(s);
        let (ped, acc) = r.frugal.median(pedestal, accumulator, x);
        let signal = _mm256_sub_epi16(x, ped);
        let kept = _mm256_mulhrs_epi16(run_sum, memory_q15);
        let added = _mm256_mulhrs_epi16(_mm256_abs_epi16(signal), scale_q15);
        let lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(kept, added), factors);
        let hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(kept, added), factors);
        let rs = _mm256_packs_epi32(lo, hi);
        if r.any_masked {
            pedestal = keep_masked(ped, pedestal, r.masked);
            accumulator = keep_masked(acc, accumulator, r.masked);
            run_sum = keep_masked(rs, run_sum, r.masked);
        } else {
            (pedestal, accumulator, run_sum) = (ped, acc, rs);
        }
        let over = _mm256_cmpgt_epi16(rs, threshold);
        r.hits(f, s, over, || (rs, x, _mm256_cmpeq_epi16(rs, top)), out);
    }
    store(&mut f.pedestal[lanes.clone()], pedestal);
    store(&mut f.accumulator[lanes], accumulator);
    store(&mut f.stages[r.g].run_sum, run_sum);
}

/// Runs group `g` through `n` (at most [`MAX_SAMPLES`]) samples from `input`, the first at
/// `t0`.
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    f: &mut HitFinder,
    g: usize,
    kernel: &Kernel,
    n: usize,
    input: impl Fn(usize) -> __m256i,
    t0: u64,
    ticks_per_sample: u64,
    out: &mut Vec<TriggerPrimitive>,
) {
    assert!(n <= MAX_SAMPLES, "at most a frame's samples per call");
    let masked = load(&f.masked[g * LANES..(g + 1) * LANES]);
    let mask_bits = _mm256_movemask_epi8(masked);
    if mask_bits == -1 {
        return;
    }
    let r = GroupRun {
        g,
        masked,
        any_masked: mask_bits != 0,
        frugal: FrugalLimits::new(f.config.accumulator_limit),
        t0,
        ticks_per_sample,
        delay_ticks: kernel.delay_samples() * ticks_per_sample,
    };
    match kernel {
        Kernel::ProtoDune(p) => run_protodune(f, &r, p, n, input, out),
        Kernel::AbsRunSum(p) => run_abs_run_sum(f, &r, p, n, input, out),
    }
}

/// Group `g` of a WIBEth frame, unpacking fused in.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub fn process_wibeth_group(
    f: &mut HitFinder,
    g: usize,
    kernel: &Kernel,
    frame: &WibEthFrame<'_>,
    t0: u64,
    ticks_per_sample: u64,
    out: &mut Vec<TriggerPrimitive>,
) {
    let input = |s| unpack_group(frame.row(s), g);
    run(
        f,
        g,
        kernel,
        wibeth::SAMPLES_PER_FRAME,
        input,
        t0,
        ticks_per_sample,
        out,
    );
}

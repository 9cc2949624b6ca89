//! AVX2 twins of the scalar stages: 16 lanes per register, the same integer arithmetic (the
//! same compares, the same exact i32 sums saturated the same way), so TPs are bit-identical.
//! A group's state stays in registers for all the samples of a WIBEth frame.

use super::{AbsRunSumParams, Kernel, ProtoDuneParams, Q25, Q75, StageState};
use crate::avx2::imp::{FrugalLimits, HitLanes, hit_lanes, load, store, unpack_group};
use crate::config::MAX_FIR_TAPS;
use crate::finder::{HitFinder, LANES};
use std::arch::x86_64::*;
use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth::{self, WibEthFrame};

const HISTORY: usize = MAX_FIR_TAPS - 1;

/// Group `g`'s state in registers: the median pedestal and every stage's.
#[derive(Clone, Copy)]
struct Regs {
    pedestal: __m256i,
    accumulator: __m256i,
    q25: __m256i,
    q25_acc: __m256i,
    q75: __m256i,
    q75_acc: __m256i,
    history: [__m256i; HISTORY],
    run_sum: __m256i,
}

impl Regs {
    #[target_feature(enable = "avx2")]
    #[inline]
    fn load(f: &HitFinder, g: usize) -> Self {
        let lanes = g * LANES..(g + 1) * LANES;
        let st = &f.stages[g];
        Self {
            pedestal: load(&f.pedestal[lanes.clone()]),
            accumulator: load(&f.accumulator[lanes]),
            q25: load(&st.q25),
            q25_acc: load(&st.q25_acc),
            q75: load(&st.q75),
            q75_acc: load(&st.q75_acc),
            history: std::array::from_fn(|k| load(&st.history[k])),
            run_sum: load(&st.run_sum),
        }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn store(&self, f: &mut HitFinder, g: usize) {
        let lanes = g * LANES..(g + 1) * LANES;
        store(&mut f.pedestal[lanes.clone()], self.pedestal);
        store(&mut f.accumulator[lanes], self.accumulator);
        let st: &mut StageState = &mut f.stages[g];
        store(&mut st.q25, self.q25);
        store(&mut st.q25_acc, self.q25_acc);
        store(&mut st.q75, self.q75);
        store(&mut st.q75_acc, self.q75_acc);
        for (k, h) in self.history.iter().enumerate() {
            store(&mut st.history[k], *h);
        }
        store(&mut st.run_sum, self.run_sum);
    }

    /// `self` where `keep` is 0, `old` where it is -1: masked lanes do not move.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn keep_masked(self, old: &Self, keep: __m256i) -> Self {
        let b = |new, old| _mm256_blendv_epi8(new, old, keep);
        Self {
            pedestal: b(self.pedestal, old.pedestal),
            accumulator: b(self.accumulator, old.accumulator),
            q25: b(self.q25, old.q25),
            q25_acc: b(self.q25_acc, old.q25_acc),
            q75: b(self.q75, old.q75),
            q75_acc: b(self.q75_acc, old.q75_acc),
            history: std::array::from_fn(|k| b(self.history[k], old.history[k])),
            run_sum: b(self.run_sum, old.run_sum),
        }
    }
}

/// A kernel's parameters, broadcast.
#[derive(Clone, Copy)]
enum Constants {
    ProtoDune {
        /// Tap pairs for madd: (t0, t1) multiplies (s[t], s[t-1]), (t2, t3) (s[t-2], s[t-3])...
        taps: [__m256i; MAX_FIR_TAPS / 2],
        shift: __m128i,
        fine_shift: __m128i,
        mult: __m256i,
        min_threshold: __m256i,
    },
    AbsRunSum {
        threshold: __m256i,
        memory_q15: __m256i,
        scale_q15: __m256i,
        /// (R, S) pairs for madd with (kept, added).
        factors: __m256i,
    },
}

/// Two i16 values as the (low, high) halves of every i32 lane, for `_mm256_madd_epi16`.
#[target_feature(enable = "avx2")]
#[inline]
fn pair(low: i16, high: i16) -> __m256i {
    _mm256_set1_epi32((low as u16 as i32) | ((high as i32) << 16))
}

impl Constants {
    #[target_feature(enable = "avx2")]
    #[inline]
    fn new(kernel: &Kernel) -> Self {
        match kernel {
            Kernel::ProtoDune(ProtoDuneParams {
                taps,
                shift,
                fine_shift,
                mult_q8,
                min_threshold,
                ..
            }) => Self::ProtoDune {
                taps: std::array::from_fn(|k| pair(taps[2 * k], taps[2 * k + 1])),
                shift: _mm_cvtsi32_si128(*shift as i32),
                fine_shift: _mm_cvtsi32_si128(*fine_shift as i32),
                mult: pair(*mult_q8, 0),
                min_threshold: _mm256_set1_epi16(*min_threshold),
            },
            Kernel::AbsRunSum(AbsRunSumParams {
                threshold,
                memory_q15,
                memory_factor,
                scale_q15,
                scale_factor,
            }) => Self::AbsRunSum {
                threshold: _mm256_set1_epi16(*threshold),
                memory_q15: _mm256_set1_epi16(*memory_q15),
                scale_q15: _mm256_set1_epi16(*scale_q15),
                factors: pair(*memory_factor, *scale_factor),
            },
        }
    }
}

/// The frugal quantile step with weights (`up`, `down`) of 1 or 3 (`scalar::frugal_step`).
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

/// Saturates the i32 lanes of `lo` (lanes 0-3, 8-11) and `hi` (4-7, 12-15) to i16 after an
/// arithmetic shift; unpack and pack both work per 128-bit half, so lane order is restored.
#[target_feature(enable = "avx2")]
#[inline]
fn shift_pack(lo: __m256i, hi: __m256i, shift: __m128i) -> __m256i {
    _mm256_packs_epi32(_mm256_sra_epi32(lo, shift), _mm256_sra_epi32(hi, shift))
}

/// One sample through the pedestal and the kernel: the new state and what TP assembly needs.
#[target_feature(enable = "avx2")]
#[inline]
fn step(r: &Regs, k: &Constants, frugal: &FrugalLimits, x: __m256i) -> (Regs, HitLanes) {
    let (pedestal, accumulator) = frugal.median(r.pedestal, r.accumulator, x);
    let signal = _mm256_sub_epi16(x, pedestal);
    let mut next = Regs {
        pedestal,
        accumulator,
        ..*r
    };
    let top = _mm256_set1_epi16(i16::MAX);
    let lanes = match *k {
        Constants::ProtoDune {
            taps,
            shift,
            fine_shift,
            mult,
            min_threshold,
        } => {
            let h = r.history;
            let pairs = [(signal, h[0]), (h[1], h[2]), (h[3], h[4]), (h[5], h[6])];
            let (mut lo, mut hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for ((a, b), t) in pairs.into_iter().zip(taps) {
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), t));
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), t));
            }
            next.history = [signal, h[0], h[1], h[2], h[3], h[4], h[5]];
            let filtered = shift_pack(lo, hi, shift);
            let fine = shift_pack(lo, hi, fine_shift);
            (next.q25, next.q25_acc) = quantile(frugal, Q25, r.q25, r.q25_acc, fine);
            (next.q75, next.q75_acc) = quantile(frugal, Q75, r.q75, r.q75_acc, fine);
            let zero = _mm256_setzero_si256();
            let iqr = _mm256_max_epi16(_mm256_subs_epi16(next.q75, next.q25), zero);
            // iqr x mult is exact in i32, then saturated like the scalar reference.
            let scaled = |half| _mm256_madd_epi16(half, mult);
            let threshold = _mm256_max_epi16(
                shift_pack(
                    scaled(_mm256_unpacklo_epi16(iqr, zero)),
                    scaled(_mm256_unpackhi_epi16(iqr, zero)),
                    _mm_cvtsi32_si128(8),
                ),
                min_threshold,
            );
            HitLanes {
                value: filtered,
                x,
                over: _mm256_cmpgt_epi16(fine, threshold),
                clipped: _mm256_cmpeq_epi16(fine, top),
            }
        }
        Constants::AbsRunSum {
            threshold,
            memory_q15,
            scale_q15,
            factors,
        } => {
            let kept = _mm256_mulhrs_epi16(r.run_sum, memory_q15);
            let added = _mm256_mulhrs_epi16(_mm256_abs_epi16(signal), scale_q15);
            let lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(kept, added), factors);
            let hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(kept, added), factors);
            next.run_sum = _mm256_packs_epi32(lo, hi);
            HitLanes {
                value: next.run_sum,
                x,
                over: _mm256_cmpgt_epi16(next.run_sum, threshold),
                clipped: _mm256_cmpeq_epi16(next.run_sum, top),
            }
        }
    };
    (next, lanes)
}

/// Runs group `g` through `n` samples from `input`, the first at `t0`.
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn run(
    f: &mut HitFinder,
    g: usize,
    kernel: &Kernel,
    n: usize,
    input: impl Fn(usize) -> __m256i,
    t0: u64,
    ticks_per_sample: u64,
    out: &mut Vec<TriggerPrimitive>,
) {
    let lanes = g * LANES..(g + 1) * LANES;
    let masked = load(&f.masked[lanes.clone()]);
    let mask_bits = _mm256_movemask_epi8(masked);
    if mask_bits == -1 {
        return;
    }
    let k = Constants::new(kernel);
    let frugal = FrugalLimits::new(f.config.accumulator_limit);
    let delay_ticks = kernel.delay_samples() * ticks_per_sample;
    let mut regs = Regs::load(f, g);
    for s in 0..n {
        let (mut next, mut hit) = step(&regs, &k, &frugal, input(s));
        if mask_bits != 0 {
            // Masked lanes keep their state and make no hits, as in the scalar path.
            next = next.keep_masked(&regs, masked);
            hit.over = _mm256_andnot_si256(masked, hit.over);
        }
        regs = next;
        let open = load(&f.hits.open[lanes.clone()]);
        let busy = _mm256_movemask_epi8(_mm256_or_si256(hit.over, open)) as u32;
        if busy != 0 {
            let ts = (t0 + s as u64 * ticks_per_sample).saturating_sub(delay_ticks);
            hit_lanes(f, g, busy, &hit, ts, out);
        }
    }
    regs.store(f, g);
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

/// One sample `x` of group `g`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub fn process_row_group(
    f: &mut HitFinder,
    g: usize,
    kernel: &Kernel,
    x: __m256i,
    ts: u64,
    out: &mut Vec<TriggerPrimitive>,
) {
    let ticks_per_sample = f.ticks_per_sample;
    run(f, g, kernel, 1, |_| x, ts, ticks_per_sample, out);
}

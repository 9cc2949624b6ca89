//! The AVX2 twin of `HitFinder::process_row_scalar`: 16 channels per 256-bit register, the
//! 14-bit WIBEth and 12-bit ProtoDUNE WIB unpacking fused in (byte shuffles, shifts, masks),
//! and the rare lanes
//! that are over threshold or inside a hit handed to the shared TP assembly. Every operation
//! is the scalar reference's on 16-bit integers, so the results are bit-identical (tests in
//! `tests/equivalence.rs`).
//!
//! The primitives it shares with the stages' AVX2 twins (`stages::avx2`, which it calls for
//! groups running another algorithm) are in `simd`.

use crate::finder::{HitFinder, LANES};
use swdaq_format::TriggerPrimitive;
use swdaq_format::protowib;
use swdaq_format::wibeth::{self, WibEthFrame};

pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
pub use imp::{
    process_protowib_block, process_row, process_wibeth, unpack_protowib, unpack_wibeth_row,
};

/// # Safety
/// Never called: AVX2 finders are not built on other architectures.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn process_wibeth(
    _: &mut HitFinder,
    _: &WibEthFrame<'_>,
    _: u64,
    _: u64,
    _: &mut Vec<TriggerPrimitive>,
) {
    unreachable!("AVX2 finders are not built without AVX2")
}

/// # Safety
/// Never called: AVX2 finders are not built on other architectures.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn process_protowib_block(
    _: &mut HitFinder,
    _: &[u8],
    _: u64,
    _: &mut Vec<TriggerPrimitive>,
) {
    unreachable!("AVX2 finders are not built without AVX2")
}

/// # Safety
/// Never called: AVX2 finders are not built on other architectures.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn process_row(_: &mut HitFinder, _: u64, _: &[u16], _: &mut Vec<TriggerPrimitive>) {
    unreachable!("AVX2 finders are not built without AVX2")
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::*;
    use crate::simd::{FrugalLimits, HitLanes, hit_lanes, load, store, unpack_group};
    use std::arch::x86_64::*;

    /// Unpacks a 112-byte WIBEth row into four registers of 16 channels each.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub fn unpack_wibeth_row(row: &[u8; wibeth::ROW_BYTES]) -> [__m256i; 4] {
        std::array::from_fn(|g| unpack_group(row, g))
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn process_wibeth(
        f: &mut HitFinder,
        frame: &WibEthFrame<'_>,
        t0: u64,
        ticks_per_sample: u64,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        // All four groups' pedestals and accumulators stay in registers for the 64 samples,
        // and the groups interleave so their dependency chains overlap.
        let k = Constants::new(f);
        let mut groups: [Group; 4] = std::array::from_fn(|g| Group::load(f, g));
        for s in 0..wibeth::SAMPLES_PER_FRAME {
            let row = frame.row(s);
            let ts = t0 + s as u64 * ticks_per_sample;
            for (g, group) in groups.iter_mut().enumerate() {
                if !group.skipped {
                    group.step(f, &k, unpack_group(row, g), ts, out);
                }
            }
        }
        for group in &groups {
            group.store(f);
        }
        for g in 0..groups.len() {
            if let Some(kernel) = f.kernels[g] {
                crate::stages::avx2::process_wibeth_group(
                    f,
                    g,
                    &kernel,
                    frame,
                    t0,
                    ticks_per_sample,
                    out,
                );
            }
        }
    }

    /// Byte-shuffle indices for one 128-bit half of a ProtoDUNE WIB channel group: each
    /// 16-bit lane gathers the two bytes holding one 12-bit value, the even ADC's channels
    /// first. `offset`: where the half's segment starts in its 16-byte load.
    const fn protowib_shuffle(offset: i8) -> [i8; 16] {
        // (low byte, high byte) per lane: even-ADC channels k..k+4, then odd-ADC ones
        // (`protowib::SEGMENT_LAYOUT`, byte-aligned: values start at bit 0 or 4 of a byte).
        const PAIRS: [(i8, i8); 8] = [
            (0, 2),
            (2, 4),
            (6, 8),
            (8, 10),
            (1, 3),
            (3, 5),
            (7, 9),
            (9, 11),
        ];
        let mut idx = [0i8; 16];
        let mut lane = 0;
        while lane < 8 {
            idx[2 * lane] = PAIRS[lane].0 + offset;
            idx[2 * lane + 1] = PAIRS[lane].1 + offset;
            lane += 1;
        }
        idx
    }

    /// Lower half: the group's first segment (bytes 0..12, loaded from byte 0); upper half:
    /// its second (bytes 12..24, loaded from byte 8 so the last group stays in the frame).
    const PROTOWIB_SHUFFLE: [[i8; 16]; 2] = [protowib_shuffle(0), protowib_shuffle(4)];

    /// Unpacks channels 16g..16g+16 of a ProtoDUNE WIB frame: two 12-byte COLDATA segments
    /// holding 8 channels of an even ADC and 8 of the odd one.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn unpack_protowib_group(frame: &[u8; protowib::FRAME_SIZE], g: usize) -> __m256i {
        let base = protowib::segment_at(g / 4, (g % 4) * 2);
        let lo: &[u8; 16] = frame[base..base + 16].try_into().expect("16 bytes");
        let hi: &[u8; 16] = frame[base + 8..base + 24].try_into().expect("16 bytes");
        // SAFETY: 16-byte arrays and a constant 32-byte table; unaligned loads are allowed.
        let (bytes, shuffle) = unsafe {
            (
                _mm256_loadu2_m128i(hi.as_ptr().cast(), lo.as_ptr().cast()),
                _mm256_loadu_si256(PROTOWIB_SHUFFLE.as_ptr().cast()),
            )
        };
        let pairs = _mm256_shuffle_epi8(bytes, shuffle);
        // Even lanes: the value's low 8 bits, then 4 in the next byte's low nibble. Odd
        // lanes: the low 4 bits in a byte's high nibble, then 8 in the next byte.
        let low_first = _mm256_and_si256(pairs, _mm256_set1_epi16(0x0fff));
        let nibble_first = _mm256_srli_epi16::<4>(pairs);
        let values = _mm256_blend_epi16::<0b1010_1010>(low_first, nibble_first);
        // Halves hold even k0-3, odd k0-3 | even k4-7, odd k4-7: bring the even ADC first.
        _mm256_permute4x64_epi64::<0b11_01_10_00>(values)
    }

    /// Unpacks a ProtoDUNE WIB frame's 256 channels into sixteen registers.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub fn unpack_protowib(frame: &[u8; protowib::FRAME_SIZE]) -> [__m256i; 16] {
        std::array::from_fn(|g| unpack_protowib_group(frame, g))
    }

    /// Frame `s` of consecutive ProtoDUNE WIB frames.
    pub(crate) fn protowib_frame(frames: &[u8], s: usize) -> &[u8; protowib::FRAME_SIZE] {
        frames[s * protowib::FRAME_SIZE..(s + 1) * protowib::FRAME_SIZE]
            .try_into()
            .expect("a whole frame")
    }

    /// Runs `frames` (consecutive ProtoDUNE WIB frames, one sample each, the first at `t0`)
    /// group by group, each group's state in registers for all the samples.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn process_protowib_block(
        f: &mut HitFinder,
        frames: &[u8],
        t0: u64,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let n = frames.len() / protowib::FRAME_SIZE;
        let input = |g, s| unpack_protowib_group(protowib_frame(frames, s), g);
        process_groups(f, n, input, t0, out);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn process_row(
        f: &mut HitFinder,
        ts: u64,
        row: &[u16],
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let input = |g: usize, _| {
            let lanes: &[u16; LANES] = row[g * LANES..(g + 1) * LANES]
                .try_into()
                .expect("16 lanes");
            // SAFETY: 16 u16 = 32 readable bytes; unaligned loads are allowed.
            unsafe { _mm256_loadu_si256(lanes.as_ptr().cast()) }
        };
        process_groups(f, 1, input, ts, out);
    }

    /// Runs every group of 16 channels through `n` samples, `input(g, s)` giving group `g`'s
    /// sample `s` (the first at `t0`), each group's state in registers meanwhile.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn process_groups(
        f: &mut HitFinder,
        n: usize,
        input: impl Fn(usize, usize) -> __m256i,
        t0: u64,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let ticks_per_sample = f.ticks_per_sample;
        for g in 0..f.channels() / LANES {
            if let Some(kernel) = f.kernels[g] {
                let input = |s| input(g, s);
                crate::stages::avx2::run(f, g, &kernel, n, input, t0, ticks_per_sample, out);
                continue;
            }
            let mut group = Group::load(f, g);
            if group.skipped {
                continue;
            }
            let k = Constants::new(f);
            for s in 0..n {
                group.step(f, &k, input(g, s), t0 + s as u64 * ticks_per_sample, out);
            }
            group.store(f);
        }
    }

    /// One group of 16 `threshold` channels' pedestal state, held in registers.
    struct Group {
        g: usize,
        pedestal: __m256i,
        accumulator: __m256i,
        any_masked: bool,
        /// Fully masked, or running another algorithm: the threshold loop passes it by.
        skipped: bool,
    }

    impl Group {
        #[target_feature(enable = "avx2")]
        #[inline]
        fn load(f: &HitFinder, g: usize) -> Self {
            let lanes = g * LANES..(g + 1) * LANES;
            let masked = _mm256_movemask_epi8(load(&f.masked[lanes.clone()]));
            Self {
                g,
                pedestal: load(&f.pedestal[lanes.clone()]),
                accumulator: load(&f.accumulator[lanes]),
                any_masked: masked != 0,
                skipped: masked == -1 || f.kernels[g].is_some(),
            }
        }

        #[target_feature(enable = "avx2")]
        #[inline]
        fn store(&self, f: &mut HitFinder) {
            let lanes = self.g * LANES..(self.g + 1) * LANES;
            store(&mut f.pedestal[lanes.clone()], self.pedestal);
            store(&mut f.accumulator[lanes], self.accumulator);
        }

        /// One sample of the group: the scalar reference's arithmetic, 16 lanes at once.
        #[target_feature(enable = "avx2")]
        #[inline]
        fn step(
            &mut self,
            f: &mut HitFinder,
            k: &Constants,
            x: __m256i,
            ts: u64,
            out: &mut Vec<TriggerPrimitive>,
        ) {
            let lanes = self.g * LANES..(self.g + 1) * LANES;
            let (old_ped, old_acc) = (self.pedestal, self.accumulator);
            let (ped, acc) = k.frugal.median(old_ped, old_acc, x);
            let signal = _mm256_sub_epi16(x, ped);
            let mut over = _mm256_cmpgt_epi16(signal, k.threshold);
            if self.any_masked {
                // Masked lanes keep their state and make no hits, as in the scalar path.
                let masked = load(&f.masked[lanes.clone()]);
                self.pedestal = _mm256_blendv_epi8(ped, old_ped, masked);
                self.accumulator = _mm256_blendv_epi8(acc, old_acc, masked);
                over = _mm256_andnot_si256(masked, over);
            } else {
                self.pedestal = ped;
                self.accumulator = acc;
            }
            let open = load(&f.hits.open[lanes]);
            let busy = _mm256_movemask_epi8(_mm256_or_si256(over, open)) as u32;
            if busy == 0 {
                return; // the common case: no hit anywhere in these 16 channels
            }
            let lanes = HitLanes {
                value: signal,
                x,
                over,
                clipped: _mm256_setzero_si256(),
            };
            hit_lanes(f, self.g, busy, &lanes, ts, out);
        }
    }

    /// Broadcast configuration values of `threshold`.
    struct Constants {
        frugal: FrugalLimits,
        threshold: __m256i,
    }

    impl Constants {
        #[target_feature(enable = "avx2")]
        #[inline]
        fn new(f: &HitFinder) -> Self {
            Self {
                frugal: FrugalLimits::new(f.config.accumulator_limit),
                threshold: _mm256_set1_epi16(f.config.threshold),
            }
        }
    }
}

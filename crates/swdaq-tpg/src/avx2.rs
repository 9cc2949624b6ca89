//! The AVX2 twin of `HitFinder::process_row_scalar`: 16 channels per 256-bit register, the
//! 14-bit WIBEth and 12-bit ProtoDUNE WIB unpacking fused in (byte shuffles, shifts, masks),
//! and the rare lanes
//! that are over threshold or inside a hit handed to the shared TP assembly. Every operation
//! is the scalar reference's on 16-bit integers, so the results are bit-identical (tests in
//! `tests/equivalence.rs`).

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
pub(crate) mod imp {
    use super::*;
    use std::arch::x86_64::*;

    /// Byte-shuffle indices and shifts for 4 channels per 128-bit half: channel `k` of a
    /// 16-channel group starts at bit 14k; its bytes are gathered into a 32-bit lane and
    /// shifted right by 14k mod 8. Register A covers channels 0..8 from the group's byte 0,
    /// register B channels 8..16 from byte 12 (so the last group never reads past the row).
    const fn shuffle(first_channel: usize, load_offset: usize) -> [i8; 32] {
        let mut idx = [-1i8; 32];
        let mut lane = 0;
        while lane < 8 {
            let k = first_channel + lane;
            let (first_byte, last_byte) = (14 * k / 8, (14 * k + 13) / 8);
            let half = (lane / 4) * 16;
            let mut b = first_byte;
            while b <= last_byte {
                idx[half + (lane % 4) * 4 + (b - first_byte)] = (b - load_offset) as i8;
                b += 1;
            }
            lane += 1;
        }
        idx
    }

    const fn shifts(first_channel: usize) -> [i32; 8] {
        let mut s = [0i32; 8];
        let mut lane = 0;
        while lane < 8 {
            s[lane] = ((14 * (first_channel + lane)) % 8) as i32;
            lane += 1;
        }
        s
    }

    const SHUFFLE_A: [i8; 32] = shuffle(0, 0);
    const SHUFFLE_B: [i8; 32] = shuffle(8, 12);
    const SHIFT_A: [i32; 8] = shifts(0);
    const SHIFT_B: [i32; 8] = shifts(8);

    /// Unpacks channels 16g..16g+16 of a 112-byte WIBEth row (bytes 28g..28g+28).
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn unpack_group(row: &[u8; wibeth::ROW_BYTES], g: usize) -> __m256i {
        // SAFETY (all loads below): constant arrays of 32 bytes and row slices of exactly 16
        // bytes taken with bounds checks; unaligned loads are allowed.
        let (sa, sb, ha, hb) = unsafe {
            (
                _mm256_loadu_si256(SHUFFLE_A.as_ptr().cast()),
                _mm256_loadu_si256(SHUFFLE_B.as_ptr().cast()),
                _mm256_loadu_si256(SHIFT_A.as_ptr().cast()),
                _mm256_loadu_si256(SHIFT_B.as_ptr().cast()),
            )
        };
        let base = g * 28;
        let lo: &[u8; 16] = row[base..base + 16].try_into().expect("16 bytes");
        let hi: &[u8; 16] = row[base + 12..base + 28].try_into().expect("16 bytes");
        // SAFETY: `lo` and `hi` are 16-byte arrays; unaligned loads are allowed.
        let (a, b) = unsafe {
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast())),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast())),
            )
        };
        let mask = _mm256_set1_epi32(0x3fff);
        let a = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(a, sa), ha), mask);
        let b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, sb), hb), mask);
        // packus interleaves 128-bit halves: a0-3 b0-3 | a4-7 b4-7 -> reorder quadwords.
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b))
    }

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

    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn load(v: &[i16]) -> __m256i {
        let lanes: &[i16; LANES] = v.try_into().expect("16 lanes");
        // SAFETY: 32 readable bytes.
        unsafe { _mm256_loadu_si256(lanes.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn store(v: &mut [i16], x: __m256i) {
        let lanes: &mut [i16; LANES] = v.try_into().expect("16 lanes");
        // SAFETY: 32 writable bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), x) }
    }

    /// The accumulator bounds of the frugal trackers, broadcast.
    #[derive(Clone, Copy)]
    pub(crate) struct FrugalLimits {
        limit: __m256i,
        minus_limit: __m256i,
    }

    impl FrugalLimits {
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(crate) fn new(limit: i16) -> Self {
            Self {
                limit: _mm256_set1_epi16(limit),
                minus_limit: _mm256_set1_epi16(-limit),
            }
        }

        /// Moves `estimate` by 1 where `acc` is strictly beyond the limits, resetting `acc`
        /// there: (estimate, acc).
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(crate) fn settle(&self, estimate: __m256i, acc: __m256i) -> (__m256i, __m256i) {
            let up = _mm256_cmpgt_epi16(acc, self.limit);
            let down = _mm256_cmpgt_epi16(self.minus_limit, acc);
            (
                _mm256_add_epi16(_mm256_sub_epi16(estimate, up), down),
                _mm256_andnot_si256(_mm256_or_si256(up, down), acc),
            )
        }

        /// The median pedestal's step (`frugal_step` with weights 1, 1): (pedestal, acc).
        #[target_feature(enable = "avx2")]
        #[inline]
        pub(crate) fn median(
            &self,
            pedestal: __m256i,
            acc: __m256i,
            x: __m256i,
        ) -> (__m256i, __m256i) {
            // acc += (x > ped) - (x < ped); the compare masks are -1 where true.
            let acc = _mm256_add_epi16(
                _mm256_sub_epi16(acc, _mm256_cmpgt_epi16(x, pedestal)),
                _mm256_cmpgt_epi16(pedestal, x),
            );
            self.settle(pedestal, acc)
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

    /// One sample of a group as TP assembly needs it.
    pub(crate) struct HitLanes {
        /// What the TP integrates (pedestal-subtracted, filtered, or running sum).
        pub value: __m256i,
        /// Raw ADC, for the saturation flag.
        pub x: __m256i,
        pub over: __m256i,
        /// Lanes where a 16-bit value saturated.
        pub clipped: __m256i,
    }

    /// The rare lanes (`busy`, a movemask) over threshold or inside a hit go through the
    /// shared TP assembly. Kept out of line so the steps stay small enough to be inlined
    /// into the sample loops.
    #[target_feature(enable = "avx2")]
    #[cold]
    #[inline(never)]
    pub(crate) fn hit_lanes(
        f: &mut HitFinder,
        g: usize,
        busy: u32,
        lanes: &HitLanes,
        ts: u64,
        out: &mut Vec<TriggerPrimitive>,
    ) {
        let rail = _mm256_cmpgt_epi16(lanes.x, _mm256_set1_epi16(f.adc_full_scale as i16 - 1));
        let saturated = _mm256_or_si256(rail, lanes.clipped);
        let (mut value, mut over, mut sat) = ([0i16; LANES], [0i16; LANES], [0i16; LANES]);
        store(&mut value, lanes.value);
        store(&mut over, lanes.over);
        store(&mut sat, saturated);
        let mut bits = busy;
        while bits != 0 {
            let lane = bits.trailing_zeros() as usize / 2;
            bits &= !(0b11 << (2 * lane));
            let c = g * LANES + lane;
            f.hits.update(
                c,
                value[lane],
                over[lane] != 0,
                sat[lane] != 0,
                ts,
                f.channel_ids[c],
                f.ctx,
                out,
            );
        }
    }
}

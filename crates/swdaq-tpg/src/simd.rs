//! The AVX2 primitives both AVX2 paths use — `threshold`'s in `avx2` and the filtered
//! algorithms' stages in `stages::avx2` — so imports go one way: `avx2` calls the stages (for
//! groups running another algorithm) and both use these: unpacking a WIBEth channel group
//! (14-bit values, fused into the loads), 16-lane loads and stores, the frugal trackers'
//! step, and handing the rare busy lanes to TP assembly. Every operation is the scalar
//! reference's on 16-bit integers (tests in `tests/equivalence.rs`).

use crate::finder::{HitFinder, LANES};
use std::arch::x86_64::*;
use swdaq_format::TriggerPrimitive;
use swdaq_format::wibeth;

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
    pub(crate) fn median(&self, pedestal: __m256i, acc: __m256i, x: __m256i) -> (__m256i, __m256i) {
        // acc += (x > ped) - (x < ped); the compare masks are -1 where true.
        let acc = _mm256_add_epi16(
            _mm256_sub_epi16(acc, _mm256_cmpgt_epi16(x, pedestal)),
            _mm256_cmpgt_epi16(pedestal, x),
        );
        self.settle(pedestal, acc)
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

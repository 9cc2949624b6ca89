//! Copying a frame into its latency-buffer slot with non-temporal (streaming) stores.
//!
//! A normal store to a line that is not in cache first reads the line in (read for
//! ownership), so copying into a cold ring moves each byte over the memory bus twice and
//! leaves the frame in this core's cache. Streaming stores write the line straight to memory,
//! which is what a NIC's or a FELIX card's DMA does: the emulator source uses them to land
//! frames the way hardware would (the hit finder then reads the frame from memory, as it would
//! behind real DMA).

/// Copies `src` into the start of `dst` (which must be at least as long) with streaming
/// stores, without ordering them: call [`fence`] before the slot is published. A source
/// landing a batch of frames fences once per batch, not per frame: a fence waits for the
/// stores to drain, which `swdaq bench readout` measures (its fence-per-frame column).
pub fn copy_streaming_unfenced(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    #[cfg(target_arch = "x86_64")]
    {
        x86::copy(dst, src);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Orders every streaming store made so far before any later store (a slot's publication),
/// so a reader never sees a frame half-written.
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 (and with it `sfence`) is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};

    const LANE: usize = 16;

    pub fn copy(dst: &mut [u8], src: &[u8]) {
        // Normal stores up to the first 16-byte boundary of `dst`, streaming stores for the
        // aligned middle, normal stores for the tail.
        let head = dst.as_ptr().align_offset(LANE).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let lanes = (dst.len() - head) / LANE;
        let body = head + lanes * LANE;
        for i in 0..lanes {
            let at = head + i * LANE;
            // SAFETY: SSE2 is part of x86-64. `at + 16 <= body <= len` for both slices, so
            // the unaligned load and the store stay in bounds, and `dst[at..]` is 16-byte
            // aligned (`head` reached the boundary, and `at` moves in steps of 16) as
            // `_mm_stream_si128` requires.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr().add(at).cast::<__m128i>());
                _mm_stream_si128(dst.as_mut_ptr().add(at).cast::<__m128i>(), v);
            }
        }
        dst[body..].copy_from_slice(&src[body..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any length, any alignment of source and destination: the bytes arrive unchanged
        /// and nothing past the copy is touched.
        #[test]
        fn copies_exactly_at_any_alignment(
            data in proptest::collection::vec(any::<u8>(), 0..9000),
            src_shift in 0usize..16,
            dst_shift in 0usize..16,
        ) {
            let mut src = vec![0u8; data.len() + src_shift];
            src[src_shift..].copy_from_slice(&data);
            let mut dst = vec![0xAAu8; data.len() + dst_shift + 32];
            copy_streaming_unfenced(&mut dst[dst_shift..], &src[src_shift..]);
            fence();
            prop_assert_eq!(&dst[dst_shift..dst_shift + data.len()], &data[..]);
            prop_assert!(dst[..dst_shift].iter().all(|&b| b == 0xAA));
            prop_assert!(dst[dst_shift + data.len()..].iter().all(|&b| b == 0xAA));
        }
    }
}

//! Cache-line prefetch hints for the SW ROD thread's memory walks: blocks the card wrote
//! (the decoder) and fragment buffers coming back cold from the consumers (the aggregator).

pub(crate) const CACHE_LINE: usize = 64;

/// Asks for the cache line holding `byte`.
#[inline(always)]
pub(crate) fn line(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults and changes no memory; SSE is part of
    // the x86_64 baseline. The pointer comes from a live reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            std::ptr::from_ref(byte).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

/// Asks for the cache lines of the first `bytes` bytes of `memory` (fewer if it is shorter).
#[inline(always)]
pub(crate) fn lines(memory: &[u8], bytes: usize) {
    // An index loop: `iter().take().step_by()` went through `nth` for every line (callgrind:
    // 4 instructions per Phase-2 chunk more).
    let end = bytes.min(memory.len());
    let mut at = 0;
    while at < end {
        line(&memory[at]);
        at += CACHE_LINE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetching_any_part_of_a_buffer_changes_nothing() {
        let memory: Vec<u8> = (0..=255).collect();
        for start in [0, 1, 63, 64, 200, 255, 256] {
            lines(&memory[start..], 4 * CACHE_LINE);
            lines(&memory[start..], 0);
        }
        line(&memory[255]);
        assert!(memory.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}

//! Little-endian field access at fixed offsets. Callers check the buffer length once
//! up front (see `error::need`), so these index without further checks.

macro_rules! le_accessors {
    ($($get:ident, $put:ident, $t:ty;)*) => {$(
        #[inline(always)]
        pub(crate) fn $get(b: &[u8], at: usize) -> $t {
            const N: usize = std::mem::size_of::<$t>();
            let mut raw = [0u8; N];
            raw.copy_from_slice(&b[at..at + N]);
            <$t>::from_le_bytes(raw)
        }
        #[inline(always)]
        pub(crate) fn $put(b: &mut [u8], at: usize, v: $t) {
            const N: usize = std::mem::size_of::<$t>();
            b[at..at + N].copy_from_slice(&v.to_le_bytes());
        }
    )*};
}

le_accessors! {
    get_u16, put_u16, u16;
    get_u32, put_u32, u32;
    get_u64, put_u64, u64;
}

/// Extracts `width` bits starting at bit `shift` of `word`.
#[inline(always)]
pub(crate) fn bits(word: u64, shift: u32, width: u32) -> u64 {
    (word >> shift) & ((1u64 << width) - 1)
}

/// Returns `word` with `width` bits at `shift` replaced by `value` (truncated to width).
#[inline(always)]
pub(crate) fn with_bits(word: u64, shift: u32, width: u32, value: u64) -> u64 {
    let mask = ((1u64 << width) - 1) << shift;
    (word & !mask) | ((value << shift) & mask)
}

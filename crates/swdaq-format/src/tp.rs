//! Trigger primitive: one hit found on one channel, 24 bytes, layout-compatible with DUNE's
//! `trgdataformats::TriggerPrimitive` version 2 so TP streams can be exchanged with DUNE tools.
//!
//! | bytes  | bits (LSB first) | field |
//! |--------|------------------|-------|
//! | 0..8   | 0..8             | version (= 2) |
//! |        | 8..16            | flags ([`tp_flags`]) |
//! |        | 16..24           | detector id |
//! |        | 24..48           | channel |
//! |        | 48..64           | samples over threshold |
//! | 8..16  | 0..64            | time_start (62.5 MHz ticks) |
//! | 16..24 | 0..16            | samples to peak (from time_start) |
//! |        | 16..48           | adc_integral |
//! |        | 48..64           | adc_peak |

use crate::error::{FormatError, need};
use crate::le::{bits, get_u64, put_u64, with_bits};

pub const TP_SIZE: usize = 24;
pub const TP_VERSION: u8 = 2;

/// Flag bits of [`TriggerPrimitive::flags`]. DUNE leaves the field free for producers.
pub mod tp_flags {
    /// The hit reached the maximum length and was closed early.
    pub const TRUNCATED: u8 = 1 << 0;
    /// A value saturated (ADC at full scale, integral or peak beyond its field).
    pub const SATURATED: u8 = 1 << 1;
    /// The channel is flagged noisy.
    pub const NOISY_CHANNEL: u8 = 1 << 2;
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TriggerPrimitive {
    pub flags: u8,
    pub detector_id: u8,
    /// 24 bits on the wire.
    pub channel: u32,
    pub samples_over_threshold: u16,
    pub time_start: u64,
    pub samples_to_peak: u16,
    pub adc_integral: u32,
    pub adc_peak: u16,
}

impl TriggerPrimitive {
    pub const MAX_CHANNEL: u32 = (1 << 24) - 1;

    /// Time of the last sample over threshold, for a given sampling period in ticks.
    pub fn time_end(&self, ticks_per_sample: u64) -> u64 {
        self.time_start + self.samples_over_threshold.saturating_sub(1) as u64 * ticks_per_sample
    }

    pub fn encode(&self, out: &mut [u8; TP_SIZE]) {
        let mut w = 0u64;
        for ((s, n), v) in [
            ((0, 8), TP_VERSION as u64),
            ((8, 8), self.flags as u64),
            ((16, 8), self.detector_id as u64),
            ((24, 24), self.channel as u64),
            ((48, 16), self.samples_over_threshold as u64),
        ] {
            w = with_bits(w, s, n, v);
        }
        put_u64(out, 0, w);
        put_u64(out, 8, self.time_start);
        let w2 = self.samples_to_peak as u64
            | (self.adc_integral as u64) << 16
            | (self.adc_peak as u64) << 48;
        put_u64(out, 16, w2);
    }

    pub fn to_bytes(&self) -> [u8; TP_SIZE] {
        let mut out = [0u8; TP_SIZE];
        self.encode(&mut out);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        need("trigger primitive", b, TP_SIZE)?;
        let w = get_u64(b, 0);
        let version = bits(w, 0, 8) as u8;
        if version != TP_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: "trigger primitive",
                supported: TP_VERSION as u32,
                got: version as u32,
            });
        }
        let w2 = get_u64(b, 16);
        Ok(Self {
            flags: bits(w, 8, 8) as u8,
            detector_id: bits(w, 16, 8) as u8,
            channel: bits(w, 24, 24) as u32,
            samples_over_threshold: bits(w, 48, 16) as u16,
            time_start: get_u64(b, 8),
            samples_to_peak: bits(w2, 0, 16) as u16,
            adc_integral: bits(w2, 16, 32) as u32,
            adc_peak: bits(w2, 48, 16) as u16,
        })
    }

    /// Decodes a packed array of TPs (a TP fragment's payload).
    pub fn decode_all(b: &[u8]) -> Result<Vec<Self>, FormatError> {
        if !b.len().is_multiple_of(TP_SIZE) {
            return Err(FormatError::Inconsistent {
                what: "trigger primitive array",
                field: "length",
                value: b.len() as u64,
            });
        }
        b.chunks_exact(TP_SIZE).map(Self::decode).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        fn arb_tp()(flags in any::<u8>(), detector_id in any::<u8>(), channel in 0..=TriggerPrimitive::MAX_CHANNEL,
                    samples_over_threshold in any::<u16>(), time_start in any::<u64>(), samples_to_peak in any::<u16>(),
                    adc_integral in any::<u32>(), adc_peak in any::<u16>()) -> TriggerPrimitive {
            TriggerPrimitive { flags, detector_id, channel, samples_over_threshold, time_start, samples_to_peak, adc_integral, adc_peak }
        }
    }

    proptest! {
        #[test]
        fn round_trip(tp in arb_tp()) {
            prop_assert_eq!(TriggerPrimitive::decode(&tp.to_bytes()).unwrap(), tp);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = TriggerPrimitive::decode(&bytes);
            let _ = TriggerPrimitive::decode_all(&bytes);
        }
    }

    #[test]
    fn layout_matches_dune_v2() {
        let tp = TriggerPrimitive {
            flags: 0xAB,
            detector_id: 3,
            channel: 0x123456,
            samples_over_threshold: 0x0708,
            time_start: 0x1122_3344_5566_7788,
            samples_to_peak: 0x0102,
            adc_integral: 0xDEAD_BEEF,
            adc_peak: 0x3FFF,
        };
        let b = tp.to_bytes();
        assert_eq!(b[0], TP_VERSION);
        assert_eq!(b[1], 0xAB);
        assert_eq!(b[2], 3);
        assert_eq!(&b[3..6], &[0x56, 0x34, 0x12]);
        assert_eq!(&b[6..8], &[0x08, 0x07]);
        assert_eq!(&b[16..18], &[0x02, 0x01]);
        assert_eq!(&b[18..22], &0xDEAD_BEEFu32.to_le_bytes());
        assert_eq!(&b[22..24], &[0xFF, 0x3F]);
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut b = TriggerPrimitive::default().to_bytes();
        b[0] = 1;
        assert!(matches!(
            TriggerPrimitive::decode(&b),
            Err(FormatError::UnsupportedVersion { got: 1, .. })
        ));
    }
}

//! ROI fragment payload (swdaq's own, fragment type [`FragmentType::ROI`]): for one link and
//! one readout window, only the regions of interest around its trigger primitives — each a
//! group of channels over a stretch of samples — with their ADCs.
//!
//! Payload header (24 bytes):
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | marker 0x3149_4F52 (`"ROI1"` in file order) |
//! | 4..8   | region count |
//! | 8..16  | full-window bytes: the fragment's size had every frame of the window been kept (header included) |
//! | 16..20 | ticks per sample |
//! | 20..24 | reserved, 0 |
//!
//! then each region, in the order written:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..8  | timestamp of the region's first sample (ticks) |
//! | 8..12 | channel group (`offline channel / group size`) |
//! | 12..16 | channel count `C` |
//! | 16..20 | sample count `S` |
//! | 20..24 | reserved, 0 |
//! | 24..24 + 4C | offline channel ids, u32 |
//! | then 2CS | ADCs, u16, channel-major: channel `c`'s samples at `2(cS + s)` |
//! | then 0..6 | zero padding to a multiple of 8 bytes |
//!
//! Why this layout: the ADCs are stored unpacked, channel-major, so a region is one
//! `numpy.frombuffer(..., "<u2").reshape(C, S)` with no bit unpacking (the 14-bit packing
//! of WIBEth would save an eighth of a region that is already a few percent of the window),
//! each channel's waveform is contiguous as analysis reads it, and the padding keeps every
//! region's 64-bit timestamp 8-byte aligned. Sample `s` of a region is at
//! `first timestamp + s * ticks per sample`: a region never spans a gap in the data.

use crate::error::{FormatError, need};
use crate::le::{get_u32, get_u64, put_u32, put_u64};

pub const ROI_MARKER: u32 = 0x3149_4F52;
pub const ROI_HEADER_SIZE: usize = 24;
pub const REGION_HEADER_SIZE: usize = 24;

const WHAT: &str = "ROI payload";

/// A parsed ROI payload: every region's lengths checked once, read in place.
#[derive(Debug, Clone, Copy)]
pub struct RoiPayload<'a> {
    pub region_count: u32,
    pub full_window_bytes: u64,
    pub ticks_per_sample: u32,
    regions: &'a [u8],
}

/// One region of interest, in place in the payload.
#[derive(Debug, Clone, Copy)]
pub struct Region<'a> {
    pub first_timestamp: u64,
    pub channel_group: u32,
    pub channels: usize,
    pub samples: usize,
    channel_ids: &'a [u8],
    adcs: &'a [u8],
}

impl<'a> RoiPayload<'a> {
    pub fn parse(payload: &'a [u8]) -> Result<Self, FormatError> {
        need(WHAT, payload, ROI_HEADER_SIZE)?;
        let marker = get_u32(payload, 0);
        if marker != ROI_MARKER {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: ROI_MARKER,
                got: marker,
            });
        }
        let parsed = Self {
            region_count: get_u32(payload, 4),
            full_window_bytes: get_u64(payload, 8),
            ticks_per_sample: get_u32(payload, 16),
            regions: &payload[ROI_HEADER_SIZE..],
        };
        let mut rest = parsed.regions;
        for _ in 0..parsed.region_count {
            let (_, len) = Region::parse(rest)?;
            rest = &rest[len..];
        }
        if !rest.is_empty() {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "region count",
                value: parsed.region_count as u64,
            });
        }
        Ok(parsed)
    }

    /// The regions, in the order written.
    pub fn regions(&self) -> impl Iterator<Item = Region<'a>> + 'a {
        let mut rest = self.regions;
        (0..self.region_count).map(move |_| {
            let (region, len) = Region::parse(rest).expect("checked by RoiPayload::parse");
            rest = &rest[len..];
            region
        })
    }
}

impl<'a> Region<'a> {
    /// The region at the start of `b` and its length in bytes (padding included).
    fn parse(b: &'a [u8]) -> Result<(Self, usize), FormatError> {
        const WHAT: &str = "ROI region";
        need(WHAT, b, REGION_HEADER_SIZE)?;
        let channels = get_u32(b, 12) as u64;
        let samples = get_u32(b, 16) as u64;
        // In u128: no count in the header can overflow the length.
        let len = padded(
            REGION_HEADER_SIZE as u128 + 4 * channels as u128 + 2 * (channels * samples) as u128,
        );
        if len > b.len() as u128 {
            return Err(FormatError::Truncated {
                what: WHAT,
                need: len.min(usize::MAX as u128) as usize,
                got: b.len(),
            });
        }
        let len = len as usize;
        let ids_end = REGION_HEADER_SIZE + 4 * channels as usize;
        let adcs_end = ids_end + 2 * (channels * samples) as usize;
        Ok((
            Self {
                first_timestamp: get_u64(b, 0),
                channel_group: get_u32(b, 8),
                channels: channels as usize,
                samples: samples as usize,
                channel_ids: &b[REGION_HEADER_SIZE..ids_end],
                adcs: &b[ids_end..adcs_end],
            },
            len,
        ))
    }

    /// Offline channel id of row `c` (`c < channels`).
    pub fn channel_id(&self, c: usize) -> u32 {
        get_u32(self.channel_ids, 4 * c)
    }

    pub fn channel_ids(&self) -> impl Iterator<Item = u32> + 'a {
        self.channel_ids
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// ADC of row `c` at sample `s` (`c < channels`, `s < samples`).
    pub fn adc(&self, c: usize, s: usize) -> u16 {
        let at = 2 * (c * self.samples + s);
        u16::from_le_bytes([self.adcs[at], self.adcs[at + 1]])
    }

    /// The ADCs, `channels x samples`, channel-major (`values[c * samples + s]`).
    pub fn adcs(&self) -> Vec<u16> {
        self.adcs
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    /// The ADCs as stored: `channels x samples` little-endian u16, channel-major.
    pub fn adc_bytes(&self) -> &'a [u8] {
        self.adcs
    }

    /// Timestamp after the last sample, for a sampling period of `ticks_per_sample`.
    pub fn end_timestamp(&self, ticks_per_sample: u64) -> u64 {
        self.first_timestamp + self.samples as u64 * ticks_per_sample
    }
}

fn padded(len: u128) -> u128 {
    len.div_ceil(8) * 8
}

/// Writes an ROI payload region by region.
pub struct RoiPayloadWriter {
    bytes: Vec<u8>,
    regions: u32,
}

impl RoiPayloadWriter {
    pub fn new(ticks_per_sample: u32) -> Self {
        let mut bytes = vec![0u8; ROI_HEADER_SIZE];
        put_u32(&mut bytes, 0, ROI_MARKER);
        put_u32(&mut bytes, 16, ticks_per_sample);
        Self { bytes, regions: 0 }
    }

    /// Appends a region; `adcs` is `channel_ids.len() x samples`, channel-major.
    pub fn push(
        &mut self,
        first_timestamp: u64,
        channel_group: u32,
        channel_ids: &[u32],
        samples: usize,
        adcs: &[u16],
    ) {
        assert_eq!(
            adcs.len(),
            channel_ids.len() * samples,
            "channels x samples"
        );
        let start = self.bytes.len();
        self.bytes.resize(start + REGION_HEADER_SIZE, 0);
        let header = &mut self.bytes[start..];
        put_u64(header, 0, first_timestamp);
        put_u32(header, 8, channel_group);
        put_u32(header, 12, channel_ids.len() as u32);
        put_u32(header, 16, samples as u32);
        self.bytes
            .extend(channel_ids.iter().flat_map(|c| c.to_le_bytes()));
        self.bytes.extend(adcs.iter().flat_map(|v| v.to_le_bytes()));
        self.bytes
            .resize(padded(self.bytes.len() as u128) as usize, 0);
        self.regions += 1;
    }

    /// The payload, given the size the fragment would have had with the whole window.
    pub fn finish(mut self, full_window_bytes: u64) -> Vec<u8> {
        put_u32(&mut self.bytes, 4, self.regions);
        put_u64(&mut self.bytes, 8, full_window_bytes);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    struct TestRegion {
        first_timestamp: u64,
        channel_group: u32,
        channel_ids: Vec<u32>,
        samples: usize,
        adcs: Vec<u16>,
    }

    fn arb_region() -> impl Strategy<Value = TestRegion> {
        (any::<u64>(), any::<u32>(), 0usize..5, 0usize..9).prop_flat_map(|(t, g, c, s)| {
            (
                proptest::collection::vec(any::<u32>(), c),
                proptest::collection::vec(any::<u16>(), c * s),
            )
                .prop_map(move |(channel_ids, adcs)| TestRegion {
                    first_timestamp: t,
                    channel_group: g,
                    channel_ids,
                    samples: s,
                    adcs,
                })
        })
    }

    fn write(regions: &[TestRegion], full: u64, tps: u32) -> Vec<u8> {
        let mut w = RoiPayloadWriter::new(tps);
        for r in regions {
            w.push(
                r.first_timestamp,
                r.channel_group,
                &r.channel_ids,
                r.samples,
                &r.adcs,
            );
        }
        w.finish(full)
    }

    proptest! {
        #[test]
        fn round_trip(regions in proptest::collection::vec(arb_region(), 0..6), full in any::<u64>(), tps in any::<u32>()) {
            let bytes = write(&regions, full, tps);
            prop_assert_eq!(bytes.len() % 8, 0);
            let p = RoiPayload::parse(&bytes).unwrap();
            prop_assert_eq!((p.region_count as usize, p.full_window_bytes, p.ticks_per_sample), (regions.len(), full, tps));
            for (got, want) in p.regions().zip(&regions) {
                prop_assert_eq!((got.first_timestamp, got.channel_group), (want.first_timestamp, want.channel_group));
                prop_assert_eq!(got.channel_ids().collect::<Vec<_>>(), want.channel_ids.clone());
                prop_assert_eq!((got.channels, got.samples), (want.channel_ids.len(), want.samples));
                prop_assert_eq!(got.adcs(), want.adcs.clone());
                for c in 0..got.channels {
                    prop_assert_eq!(got.channel_id(c), want.channel_ids[c]);
                    for s in 0..got.samples {
                        prop_assert_eq!(got.adc(c, s), want.adcs[c * want.samples + s]);
                    }
                }
            }
        }

        #[test]
        fn any_bytes_parse_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(p) = RoiPayload::parse(&b) {
                let regions: Vec<_> = p.regions().collect();
                prop_assert_eq!(regions.len(), p.region_count as usize);
                for r in regions {
                    prop_assert_eq!(r.adc_bytes().len(), 2 * r.channels * r.samples);
                }
            }
        }

        #[test]
        fn a_cut_payload_is_an_error(regions in proptest::collection::vec(arb_region(), 1..4), cut in 1usize..64) {
            let bytes = write(&regions, 0, 32);
            let cut = cut.min(bytes.len());
            prop_assert!(RoiPayload::parse(&bytes[..bytes.len() - cut]).is_err());
        }
    }

    #[test]
    fn offsets_match_the_field_table() {
        let b = write(
            &[TestRegion {
                first_timestamp: 0x0102,
                channel_group: 7,
                channel_ids: vec![112, 113],
                samples: 3,
                adcs: vec![1, 2, 3, 4, 5, 6],
            }],
            5000,
            32,
        );
        assert_eq!(&b[0..4], b"ROI1");
        assert_eq!((b[4], b[8], b[9], b[16]), (1, 0x88, 0x13, 32));
        let r = &b[ROI_HEADER_SIZE..];
        assert_eq!((r[0], r[1], r[8], r[12], r[16]), (0x02, 0x01, 7, 2, 3));
        assert_eq!((r[24], r[28]), (112, 113));
        assert_eq!((r[32], r[34], r[38], r[42]), (1, 2, 4, 6));
        // 24 + 8 + 12 = 44 bytes, padded to 48.
        assert_eq!(b.len(), ROI_HEADER_SIZE + 48);
    }

    #[test]
    fn bad_marker_huge_counts_and_trailing_bytes_are_typed_errors() {
        let mut b = write(&[], 0, 32);
        b[0] = 0;
        assert!(matches!(
            RoiPayload::parse(&b),
            Err(FormatError::BadMagic { .. })
        ));
        let mut b = write(&[], 0, 32);
        b.extend_from_slice(&[0u8; REGION_HEADER_SIZE]);
        assert!(matches!(
            RoiPayload::parse(&b),
            Err(FormatError::Inconsistent { .. })
        ));
        put_u32(&mut b, 4, 1);
        put_u32(&mut b, ROI_HEADER_SIZE + 12, u32::MAX);
        put_u32(&mut b, ROI_HEADER_SIZE + 16, u32::MAX);
        assert!(matches!(
            RoiPayload::parse(&b),
            Err(FormatError::Truncated { .. })
        ));
    }
}

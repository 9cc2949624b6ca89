//! `adc_matrix` lays any WIBEth or ProtoDUNE WIB payload out channel by channel with
//! exactly the ADCs and timestamps that were encoded, and refuses a partial frame; frames
//! that do not lie back to back (a raw file's records) make the same matrix.

use proptest::prelude::*;
use swdaq_format::adc_matrix::{adc_matrix, adc_matrix_of_frames};
use swdaq_format::daq_eth::DaqEthHeader;
use swdaq_format::protowib::{self, WibHeader};
use swdaq_format::wibeth::{self, WibEthAdcs, WibEthHeader};
use swdaq_format::{FormatError, FragmentType};

fn wibeth_payload(frames: &[WibEthAdcs], first_timestamp: u64) -> Vec<u8> {
    let mut payload = vec![0u8; frames.len() * wibeth::FRAME_SIZE];
    for (f, (adcs, out)) in frames
        .iter()
        .zip(payload.chunks_exact_mut(wibeth::FRAME_SIZE))
        .enumerate()
    {
        let daq = DaqEthHeader {
            timestamp: first_timestamp + f as u64 * wibeth::TICKS_PER_FRAME,
            ..Default::default()
        };
        wibeth::encode(&daq, &WibEthHeader::healthy(), adcs, out);
    }
    payload
}

fn wibeth_frames(max: usize) -> impl Strategy<Value = Vec<WibEthAdcs>> {
    let row = prop::array::uniform32(0..=wibeth::ADC_MAX)
        .prop_flat_map(|a| prop::array::uniform32(0..=wibeth::ADC_MAX).prop_map(move |b| (a, b)))
        .prop_map(|(a, b)| {
            let mut row = [0u16; wibeth::NUM_CHANNELS];
            row[..32].copy_from_slice(&a);
            row[32..].copy_from_slice(&b);
            row
        });
    // A few distinct rows, repeated over the frame's samples in a random order.
    (prop::collection::vec(row, 1..4), any::<u64>(), 1..=max).prop_map(|(rows, seed, frames)| {
        (0..frames)
            .map(|f| {
                std::array::from_fn(|s| {
                    rows[(seed as usize).wrapping_add(f * 7 + s * 3) % rows.len()]
                })
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn wibeth_matrix_is_the_encoded_adcs_transposed(frames in wibeth_frames(3), t0 in 0u64..1 << 60) {
        let m = adc_matrix(FragmentType::WIBETH, &wibeth_payload(&frames, t0)).unwrap().unwrap();
        let samples = frames.len() * wibeth::SAMPLES_PER_FRAME;
        prop_assert_eq!((m.channels, m.samples), (wibeth::NUM_CHANNELS, samples));
        for (f, adcs) in frames.iter().enumerate() {
            for (s, row) in adcs.iter().enumerate() {
                let at = f * wibeth::SAMPLES_PER_FRAME + s;
                for (c, &v) in row.iter().enumerate() {
                    prop_assert_eq!(m.values[c * samples + at], v);
                }
                prop_assert_eq!(m.timestamps[at], t0 + at as u64 * wibeth::TICKS_PER_SAMPLE);
            }
        }
    }

    #[test]
    fn protowib_matrix_is_the_encoded_adcs_transposed(
        rows in prop::collection::vec(prop::collection::vec(0..=protowib::ADC_MAX, protowib::NUM_CHANNELS), 1..6),
        t0 in 0u64..1 << 47,
    ) {
        let mut payload = vec![0u8; rows.len() * protowib::FRAME_SIZE];
        for (s, (row, out)) in rows.iter().zip(payload.chunks_exact_mut(protowib::FRAME_SIZE)).enumerate() {
            let header = WibHeader { timestamp: t0 + s as u64 * protowib::TICKS_PER_SAMPLE, z: 1, ..Default::default() };
            protowib::encode(&header, row.as_slice().try_into().unwrap(), out);
        }
        let m = adc_matrix(FragmentType::PROTO_WIB, &payload).unwrap().unwrap();
        prop_assert_eq!((m.channels, m.samples), (protowib::NUM_CHANNELS, rows.len()));
        for (s, row) in rows.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                prop_assert_eq!(m.values[c * rows.len() + s], v);
            }
            prop_assert_eq!(m.timestamps[s], t0 + s as u64 * protowib::TICKS_PER_SAMPLE);
        }
    }

    #[test]
    fn frames_apart_make_the_matrix_of_the_frames_together(frames in wibeth_frames(3), t0 in 0u64..1 << 60, cut in 1usize..wibeth::FRAME_SIZE) {
        let payload = wibeth_payload(&frames, t0);
        // Each frame in its own allocation, as a raw file's records lie apart.
        let apart: Vec<Vec<u8>> = payload.chunks_exact(wibeth::FRAME_SIZE).map(<[u8]>::to_vec).collect();
        let mut views: Vec<&[u8]> = apart.iter().map(Vec::as_slice).collect();
        let together = adc_matrix(FragmentType::WIBETH, &payload).unwrap().unwrap();
        prop_assert_eq!(adc_matrix_of_frames(FragmentType::WIBETH, &views).unwrap().unwrap(), together);
        let last = views.len() - 1;
        views[last] = &apart[last][..wibeth::FRAME_SIZE - cut];
        let refused = adc_matrix_of_frames(FragmentType::WIBETH, &views).unwrap();
        let is_truncated = matches!(refused, Err(FormatError::Truncated { .. }));
        prop_assert!(is_truncated);
    }

    #[test]
    fn a_partial_frame_is_refused_not_read(frames in wibeth_frames(2), cut in 1usize..wibeth::FRAME_SIZE) {
        let payload = wibeth_payload(&frames, 0);
        let result = adc_matrix(FragmentType::WIBETH, &payload[..payload.len() - cut]).unwrap();
        let is_truncated = matches!(result, Err(FormatError::Truncated { .. }));
        prop_assert!(is_truncated);
    }
}

#[test]
fn fragments_without_adcs_have_no_matrix() {
    assert!(adc_matrix(FragmentType::TRIGGER_PRIMITIVE, &[0; 48]).is_none());
    let empty = adc_matrix(FragmentType::WIBETH, &[]).unwrap().unwrap();
    assert_eq!((empty.channels, empty.samples), (wibeth::NUM_CHANNELS, 0));
}

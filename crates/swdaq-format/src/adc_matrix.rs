//! A readout fragment's ADCs as analysis wants them: one row per channel, samples along the
//! row, with each sample's timestamp (the `swdaq` Python package's `Fragment.adcs()`).

use crate::protowib::{self, ProtoWibFrame};
use crate::wibeth::{self, WibEthAdcs, WibEthFrame};
use crate::{FormatError, FragmentType};

/// ADCs of one fragment, channel-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdcMatrix {
    pub channels: usize,
    pub samples: usize,
    /// `values[c * samples + s]`: channel `c` (the frame's channel order) at sample `s`.
    pub values: Vec<u16>,
    /// Timestamp of each sample, in the format's clock ticks.
    pub timestamps: Vec<u64>,
}

/// The ADCs of a WIBEth or ProtoDUNE WIB payload (`None`: the fragment type carries no
/// ADCs); a payload that is not a whole number of frames is an error.
pub fn adc_matrix(
    fragment_type: FragmentType,
    payload: &[u8],
) -> Option<Result<AdcMatrix, FormatError>> {
    let (what, frame_size) = match fragment_type {
        FragmentType::WIBETH => ("WIBEth payload", wibeth::FRAME_SIZE),
        FragmentType::PROTO_WIB => ("ProtoDUNE WIB payload", protowib::FRAME_SIZE),
        _ => return None,
    };
    if !payload.len().is_multiple_of(frame_size) {
        return Some(Err(FormatError::Truncated {
            what,
            need: payload.len().div_ceil(frame_size) * frame_size,
            got: payload.len(),
        }));
    }
    let frames: Vec<&[u8]> = payload.chunks_exact(frame_size).collect();
    adc_matrix_of_frames(fragment_type, &frames)
}

/// The ADCs of consecutive frames that do not lie back to back (a raw file's records, each
/// behind its record header), as one matrix; a frame of the wrong size is an error.
pub fn adc_matrix_of_frames(
    fragment_type: FragmentType,
    frames: &[&[u8]],
) -> Option<Result<AdcMatrix, FormatError>> {
    match fragment_type {
        FragmentType::WIBETH => Some(wibeth_matrix(frames)),
        FragmentType::PROTO_WIB => Some(protowib_matrix(frames)),
        _ => None,
    }
}

fn wibeth_matrix(frames: &[&[u8]]) -> Result<AdcMatrix, FormatError> {
    let samples = frames.len() * wibeth::SAMPLES_PER_FRAME;
    let mut values = vec![0u16; wibeth::NUM_CHANNELS * samples];
    let mut timestamps = Vec::with_capacity(samples);
    // A frame is unpacked in sample order into a 64 x 64 tile (8 KiB, in L1), then each
    // channel's 64 samples are written out as one contiguous run.
    let mut tile: WibEthAdcs = [[0; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
    for (f, bytes) in frames.iter().enumerate() {
        let frame = WibEthFrame::parse(bytes)?;
        frame.unpack(&mut tile);
        let first = f * wibeth::SAMPLES_PER_FRAME;
        for c in 0..wibeth::NUM_CHANNELS {
            let run = &mut values[c * samples + first..][..wibeth::SAMPLES_PER_FRAME];
            for (v, row) in run.iter_mut().zip(&tile) {
                *v = row[c];
            }
        }
        timestamps.extend(
            (0..wibeth::SAMPLES_PER_FRAME as u64)
                .map(|s| frame.timestamp() + s * wibeth::TICKS_PER_SAMPLE),
        );
    }
    Ok(AdcMatrix {
        channels: wibeth::NUM_CHANNELS,
        samples,
        values,
        timestamps,
    })
}

fn protowib_matrix(frames: &[&[u8]]) -> Result<AdcMatrix, FormatError> {
    let samples = frames.len();
    let mut values = vec![0u16; protowib::NUM_CHANNELS * samples];
    let mut timestamps = Vec::with_capacity(samples);
    let mut row = [0u16; protowib::NUM_CHANNELS];
    for (s, bytes) in frames.iter().enumerate() {
        let frame = ProtoWibFrame::parse(bytes)?;
        frame.unpack(&mut row);
        for (c, &v) in row.iter().enumerate() {
            values[c * samples + s] = v;
        }
        timestamps.push(frame.timestamp());
    }
    Ok(AdcMatrix {
        channels: protowib::NUM_CHANNELS,
        samples,
        values,
        timestamps,
    })
}

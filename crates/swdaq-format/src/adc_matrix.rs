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
    match fragment_type {
        FragmentType::WIBETH => Some(wibeth_matrix(payload)),
        FragmentType::PROTO_WIB => Some(protowib_matrix(payload)),
        _ => None,
    }
}

/// How many frames `payload` holds; a partial last frame is `Truncated`.
fn whole_frames(what: &'static str, payload: &[u8], frame: usize) -> Result<usize, FormatError> {
    if !payload.len().is_multiple_of(frame) {
        return Err(FormatError::Truncated {
            what,
            need: payload.len().div_ceil(frame) * frame,
            got: payload.len(),
        });
    }
    Ok(payload.len() / frame)
}

fn wibeth_matrix(payload: &[u8]) -> Result<AdcMatrix, FormatError> {
    let frames = whole_frames("WIBEth payload", payload, wibeth::FRAME_SIZE)?;
    let samples = frames * wibeth::SAMPLES_PER_FRAME;
    let mut values = vec![0u16; wibeth::NUM_CHANNELS * samples];
    let mut timestamps = Vec::with_capacity(samples);
    // A frame is unpacked in sample order into a 64 x 64 tile (8 KiB, in L1), then each
    // channel's 64 samples are written out as one contiguous run.
    let mut tile: WibEthAdcs = [[0; wibeth::NUM_CHANNELS]; wibeth::SAMPLES_PER_FRAME];
    for (f, bytes) in payload.chunks_exact(wibeth::FRAME_SIZE).enumerate() {
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

fn protowib_matrix(payload: &[u8]) -> Result<AdcMatrix, FormatError> {
    let samples = whole_frames("ProtoDUNE WIB payload", payload, protowib::FRAME_SIZE)?;
    let mut values = vec![0u16; protowib::NUM_CHANNELS * samples];
    let mut timestamps = Vec::with_capacity(samples);
    let mut row = [0u16; protowib::NUM_CHANNELS];
    for (s, bytes) in payload.chunks_exact(protowib::FRAME_SIZE).enumerate() {
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

//! What the readout needs to know about a link's frame format: size, timestamp step,
//! and the header fields the continuity checks read.

use swdaq_format::daq_eth::SEQ_ID_MODULUS;
use swdaq_format::{FragmentType, protowib, wibeth};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkFormat {
    WibEth,
    ProtoWib,
}

/// Header fields of one frame, as the checks see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub timestamp: u64,
    /// 12-bit sequence id where the format has one.
    pub seq_id: Option<u16>,
    /// The front end reported a problem in the header's status bits.
    pub header_error: bool,
}

impl LinkFormat {
    pub fn frame_size(self) -> usize {
        match self {
            Self::WibEth => wibeth::FRAME_SIZE,
            Self::ProtoWib => protowib::FRAME_SIZE,
        }
    }

    pub fn ticks_per_frame(self) -> u64 {
        match self {
            Self::WibEth => wibeth::TICKS_PER_FRAME,
            Self::ProtoWib => protowib::TICKS_PER_FRAME,
        }
    }

    pub fn fragment_type(self) -> FragmentType {
        match self {
            Self::WibEth => FragmentType::WIBETH,
            Self::ProtoWib => FragmentType::PROTO_WIB,
        }
    }

    /// Frames per second at the nominal clock (62.5 MHz WIBEth, 50 MHz ProtoDUNE WIB).
    pub fn frame_rate_hz(self) -> f64 {
        let clock = match self {
            Self::WibEth => 62.5e6,
            Self::ProtoWib => 50e6,
        };
        clock / self.ticks_per_frame() as f64
    }

    pub fn seq_modulus(self) -> u16 {
        SEQ_ID_MODULUS
    }

    /// Reads the header of a frame of exactly [`Self::frame_size`] bytes; `None` otherwise.
    pub fn header(self, frame: &[u8]) -> Option<FrameHeader> {
        match self {
            Self::WibEth => {
                let f = wibeth::WibEthFrame::parse(frame).ok()?;
                let daq = f.daq_header();
                Some(FrameHeader {
                    timestamp: daq.timestamp,
                    seq_id: Some(daq.seq_id),
                    header_error: f.wib_header().has_error(),
                })
            }
            Self::ProtoWib => {
                let h = protowib::ProtoWibFrame::parse(frame).ok()?.wib_header();
                Some(FrameHeader {
                    timestamp: h.timestamp,
                    seq_id: None,
                    header_error: h.wib_errors != 0 || h.oos != 0 || h.mm != 0,
                })
            }
        }
    }
}

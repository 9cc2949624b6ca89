//! The frame formats a link reads as one type: the facts every stage needs (sizes, clocks,
//! sample layout, ADC width, fragment type) and the header fields the readout's checks read.
//! Two TPC formats, and a detector's own time slices in swdaq's board frames.

use crate::board_frame::{BoardFrame, BoardFrames, DAMAGED_FLAGS};
use crate::daq_eth::SEQ_ID_MODULUS;
use crate::{FragmentType, protowib, wibeth};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameFormat {
    /// WIBEth: 64 channels x 64 samples of 14 bits per frame, 62.5 MHz clock.
    WibEth,
    /// ProtoDUNE-SP WIB: 256 channels x 1 sample of 12 bits per frame, 50 MHz clock.
    ProtoWib,
    /// A detector's own time slices, each decoded from its board's packets into a board frame
    /// of at most the given size and span (`board_frame`): no channels or ADCs swdaq knows.
    Board(BoardFrames),
}

/// Header fields of one frame, as the readout's checks see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub timestamp: u64,
    /// 12-bit sequence id where the format has one.
    pub seq_id: Option<u16>,
    /// The front end reported a problem in the header's status bits.
    pub header_error: bool,
}

impl FrameFormat {
    pub fn name(self) -> &'static str {
        match self {
            Self::WibEth => "wibeth",
            Self::ProtoWib => "protowib",
            Self::Board(_) => "board",
        }
    }

    pub fn frame_size(self) -> usize {
        match self {
            Self::WibEth => wibeth::FRAME_SIZE,
            Self::ProtoWib => protowib::FRAME_SIZE,
            Self::Board(b) => b.max_frame_size(),
        }
    }

    pub fn channels(self) -> usize {
        match self {
            Self::WibEth => wibeth::NUM_CHANNELS,
            Self::ProtoWib => protowib::NUM_CHANNELS,
            Self::Board(_) => 0,
        }
    }

    pub fn samples_per_frame(self) -> usize {
        match self {
            Self::WibEth => wibeth::SAMPLES_PER_FRAME,
            Self::ProtoWib => 1,
            Self::Board(b) => (b.ticks_per_frame / b.ticks_per_sample.max(1)) as usize,
        }
    }

    pub fn ticks_per_sample(self) -> u64 {
        match self {
            Self::WibEth => wibeth::TICKS_PER_SAMPLE,
            Self::ProtoWib => protowib::TICKS_PER_SAMPLE,
            Self::Board(b) => b.ticks_per_sample,
        }
    }

    pub fn ticks_per_frame(self) -> u64 {
        match self {
            Self::Board(b) => b.ticks_per_frame,
            _ => self.ticks_per_sample() * self.samples_per_frame() as u64,
        }
    }

    pub fn adc_bits(self) -> u32 {
        match self {
            Self::WibEth => wibeth::BITS_PER_ADC,
            Self::ProtoWib => protowib::BITS_PER_ADC,
            // The payload is the detector's: swdaq reads no ADCs in it.
            Self::Board(_) => 0,
        }
    }

    /// The timestamp clock: 62.5 MHz WIBEth, 50 MHz ProtoDUNE WIB, the detector's own.
    pub fn clock_hz(self) -> f64 {
        match self {
            Self::WibEth => 62.5e6,
            Self::ProtoWib => 50e6,
            Self::Board(b) => b.clock_hz as f64,
        }
    }

    /// Samples per second of one channel.
    pub fn sample_rate_hz(self) -> f64 {
        self.clock_hz() / self.ticks_per_sample() as f64
    }

    /// Frames per second of one link.
    pub fn frame_rate_hz(self) -> f64 {
        self.clock_hz() / self.ticks_per_frame() as f64
    }

    pub fn fragment_type(self) -> FragmentType {
        match self {
            Self::WibEth => FragmentType::WIBETH,
            Self::ProtoWib => FragmentType::PROTO_WIB,
            Self::Board(_) => FragmentType::DETECTOR_FRAMES,
        }
    }

    pub fn seq_modulus(self) -> u16 {
        SEQ_ID_MODULUS
    }

    /// Reads the header of a frame of exactly [`Self::frame_size`] bytes (a board frame: of
    /// exactly its own size, at most that); `None` otherwise.
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
            Self::Board(b) => {
                let f = BoardFrame::parse(frame).ok()?;
                (f.payload.len() <= b.max_payload as usize).then_some(FrameHeader {
                    timestamp: f.timestamp,
                    seq_id: None,
                    header_error: f.flags & DAMAGED_FLAGS != 0,
                })
            }
        }
    }
}

//! SourceID: which component produced a piece of data (DUNE `daqdataformats::SourceID` v2).
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..2  | version (u16, = 2) |
//! | 2..4  | subsystem (u16, see [`Subsystem`]) |
//! | 4..8  | id (u32) |

use crate::error::{FormatError, need};
use crate::le::{get_u16, get_u32, put_u16, put_u32};
use std::fmt;

pub const SOURCE_ID_SIZE: usize = 8;
pub const SOURCE_ID_VERSION: u16 = 2;

/// The DAQ subsystem a source belongs to. Unknown codes from newer writers are kept as
/// they are, so a record is never rejected for a name this build does not know.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Subsystem(pub u16);

impl Subsystem {
    pub const UNKNOWN: Self = Self(0);
    pub const DETECTOR_READOUT: Self = Self(1);
    pub const HW_SIGNALS_INTERFACE: Self = Self(2);
    pub const TRIGGER: Self = Self(3);
    pub const TR_BUILDER: Self = Self(4);

    /// The name DUNE uses for this subsystem (in HDF5 paths, for example).
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "Detector_Readout",
            2 => "HW_Signals_Interface",
            3 => "Trigger",
            4 => "TR_Builder",
            _ => "Unknown",
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct SourceId {
    pub subsystem: Subsystem,
    pub id: u32,
}

impl SourceId {
    pub const fn new(subsystem: Subsystem, id: u32) -> Self {
        Self { subsystem, id }
    }

    pub const fn readout(id: u32) -> Self {
        Self::new(Subsystem::DETECTOR_READOUT, id)
    }

    pub const fn trigger(id: u32) -> Self {
        Self::new(Subsystem::TRIGGER, id)
    }

    pub fn encode(&self, out: &mut [u8]) {
        put_u16(out, 0, SOURCE_ID_VERSION);
        put_u16(out, 2, self.subsystem.0);
        put_u32(out, 4, self.id);
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        need("SourceID", b, SOURCE_ID_SIZE)?;
        let version = get_u16(b, 0);
        if version != SOURCE_ID_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: "SourceID",
                supported: SOURCE_ID_VERSION as u32,
                got: version as u32,
            });
        }
        Ok(Self::new(Subsystem(get_u16(b, 2)), get_u32(b, 4)))
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:0x{:08x}", self.subsystem.name(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(subsystem in any::<u16>(), id in any::<u32>()) {
            let s = SourceId::new(Subsystem(subsystem), id);
            let mut b = [0u8; SOURCE_ID_SIZE];
            s.encode(&mut b);
            prop_assert_eq!(SourceId::decode(&b).unwrap(), s);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = SourceId::decode(&b);
        }
    }

    #[test]
    fn layout() {
        let mut b = [0u8; SOURCE_ID_SIZE];
        SourceId::readout(0x0102_0304).encode(&mut b);
        assert_eq!(b, [2, 0, 1, 0, 4, 3, 2, 1]);
        assert_eq!(
            SourceId::readout(5).to_string(),
            "Detector_Readout:0x00000005"
        );
    }
}

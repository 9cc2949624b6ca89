//! Offline channel numbers and planes, APA-like: 2560 channels per APA, induction U
//! 0..800, induction V 800..1600, collection X 1600..2560 (repeating per APA).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Plane {
    U,
    V,
    X,
}

impl Plane {
    pub fn of(offline_channel: u32) -> Self {
        match offline_channel % 2560 {
            0..800 => Self::U,
            800..1600 => Self::V,
            _ => Self::X,
        }
    }

    pub fn is_collection(self) -> bool {
        self == Self::X
    }
}

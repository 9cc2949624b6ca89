//! The tally's one message: a counter tells the next one its count.

use serde::{Deserialize, Serialize};
use swdaq_net::WireMessage;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TallyMessage {
    /// What the sender has counted so far; `last`: it has stopped counting.
    Count { counted: u64, last: bool },
}

impl WireMessage for TallyMessage {
    const MODEL: u16 = 4;
    /// Bump on any change to [`TallyMessage`].
    const VERSION: u16 = 1;

    fn kind(&self) -> &'static str {
        match self {
            TallyMessage::Count { .. } => "tally-count",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_net::wire::{decode, encode};

    #[test]
    fn a_count_survives_the_round_trip() {
        let m = TallyMessage::Count {
            counted: 1 << 40,
            last: true,
        };
        let d = decode::<TallyMessage>(&encode(3, &m, 0)).unwrap();
        assert_eq!((d.sender, d.message), (3, m));
    }
}

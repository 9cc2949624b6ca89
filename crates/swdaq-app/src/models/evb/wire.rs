//! The event builder's messages on `swdaq-net`'s wire: a builder unit asks the event manager
//! for events and the readout units for super-fragments; both answer it.

use serde::{Deserialize, Serialize};
use swdaq_evb::message::{BuRequest, FragmentRequest, ToBu};
use swdaq_net::WireMessage;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EvbMessage {
    /// A builder unit asks the event manager for events.
    Request(BuRequest),
    /// Assignments (event manager) or super-fragments (readout units) to a builder unit, or
    /// the end of a lumi section or of the run.
    ToBu(ToBu),
    /// A builder unit asks a readout unit for super-fragments.
    FragmentRequest(FragmentRequest),
}

impl WireMessage for EvbMessage {
    const MODEL: u16 = 2;
    /// Bump on any change to [`EvbMessage`].
    const VERSION: u16 = 1;

    fn kind(&self) -> &'static str {
        match self {
            EvbMessage::Request(_) => "evb-request",
            EvbMessage::ToBu(_) => "evb-to-bu",
            EvbMessage::FragmentRequest(_) => "evb-fragment-request",
        }
    }
}

impl From<BuRequest> for EvbMessage {
    fn from(r: BuRequest) -> Self {
        EvbMessage::Request(r)
    }
}

impl From<ToBu> for EvbMessage {
    fn from(m: ToBu) -> Self {
        EvbMessage::ToBu(m)
    }
}

impl From<FragmentRequest> for EvbMessage {
    fn from(r: FragmentRequest) -> Self {
        EvbMessage::FragmentRequest(r)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use swdaq_evb::message::{Assignment, SuperFragment};

    fn super_fragment() -> SuperFragment {
        SuperFragment {
            ru: 1,
            event: 3,
            bad_feds: 0,
            data: (0..=255).collect(),
        }
    }

    pub(crate) fn every_kind() -> Vec<EvbMessage> {
        vec![
            EvbMessage::Request(BuRequest {
                bu: 1,
                count: 32,
                settled: vec![4, 5, 9],
            }),
            EvbMessage::ToBu(ToBu::Assigned(vec![Assignment {
                event: 3,
                trigger_ns: 1_000,
                evm_fragment: super_fragment(),
            }])),
            EvbMessage::ToBu(ToBu::Fragments(vec![super_fragment(); 2])),
            EvbMessage::ToBu(ToBu::EndOfRun { last_lumi: Some(3) }),
            EvbMessage::ToBu(ToBu::EndOfLumi {
                lumi: 2,
                total_events: 17,
            }),
            EvbMessage::FragmentRequest(FragmentRequest {
                bu: 0,
                events: vec![3, 4],
            }),
        ]
    }
}

//! The SW ROD's messages on `swdaq-net`'s wire: the HLT supervisor gives L1 accepts to HLT
//! applications by credit and tells the SW ROD applications how far their cards may run; an
//! HLT application asks the SW ROD applications for ROB fragments, which answer with each
//! fragment found as a frame of its own.

use serde::{Deserialize, Serialize};
use swdaq_net::WireMessage;
use swdaq_swrod::message::{HltRequest, RobAnswer, RobAsk, ToHlt, frames_of};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SwrodMessage {
    /// An HLT application asks the HLT supervisor for events.
    HltRequest(HltRequest),
    /// L1 accepts (or the end of the run), HLT supervisor to an HLT application.
    ToHlt(ToHlt),
    /// The cards of a SW ROD application may send L1 accepts up to this many (the HLT
    /// supervisor's L1 accepts and how far ahead of them the cards may run).
    L1aHorizon { l1as: u64 },
    /// An HLT application asks a SW ROD application for ROB fragments.
    RobRequests(Vec<RobAsk>),
    /// A SW ROD application's answers; followed by a frame per fragment found.
    RobAnswers(Vec<RobAnswer>),
}

impl WireMessage for SwrodMessage {
    const MODEL: u16 = 3;
    /// Bump on any change to [`SwrodMessage`].
    const VERSION: u16 = 1;

    fn kind(&self) -> &'static str {
        match self {
            SwrodMessage::HltRequest(_) => "hlt-request",
            SwrodMessage::ToHlt(_) => "to-hlt",
            SwrodMessage::L1aHorizon { .. } => "l1a-horizon",
            SwrodMessage::RobRequests(_) => "rob-requests",
            SwrodMessage::RobAnswers(_) => "rob-answers",
        }
    }

    /// A SW ROD application's fragments found follow its answers.
    fn frames_after(&self) -> usize {
        match self {
            SwrodMessage::RobAnswers(answers) => frames_of(answers),
            _ => 0,
        }
    }
}

impl From<HltRequest> for SwrodMessage {
    fn from(r: HltRequest) -> Self {
        SwrodMessage::HltRequest(r)
    }
}

impl From<ToHlt> for SwrodMessage {
    fn from(m: ToHlt) -> Self {
        SwrodMessage::ToHlt(m)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use swdaq_net::wire::{decode, encode};
    use swdaq_swrod::consumers::RobRequestStatus;
    use swdaq_swrod::trigger::L1Accept;

    fn answer(status: RobRequestStatus) -> RobAnswer {
        RobAnswer {
            source_id: 0x71_0000,
            l1_id: 5,
            status,
            complete: true,
        }
    }

    pub(crate) fn every_kind() -> Vec<SwrodMessage> {
        vec![
            SwrodMessage::HltRequest(HltRequest {
                hlt: 1,
                count: 64,
                settled: vec![7, 8, 12],
            }),
            SwrodMessage::ToHlt(ToHlt::Assigned(vec![L1Accept {
                global_id: 9,
                l1_id: 0x0100_0002,
                bc_id: 333,
                trigger_type: 0x81,
                lumi_block: 2,
                time_seconds: 1_800_000_000,
                time_nanoseconds: 5,
            }])),
            SwrodMessage::ToHlt(ToHlt::EndOfRun),
            SwrodMessage::L1aHorizon { l1as: 4096 },
            SwrodMessage::RobRequests(vec![RobAsk {
                source_id: 0x71_0001,
                l1_id: 5,
            }]),
            SwrodMessage::RobAnswers(vec![
                answer(RobRequestStatus::Found),
                answer(RobRequestStatus::NotYet),
                answer(RobRequestStatus::Found),
            ]),
        ]
    }

    #[test]
    fn answers_are_followed_by_a_frame_per_fragment_found() {
        // Two fragments found: two frames, not one, not three.
        let answers = SwrodMessage::RobAnswers(vec![
            answer(RobRequestStatus::Found),
            answer(RobRequestStatus::Gone),
            answer(RobRequestStatus::Found),
        ]);
        for frames in [0, 1, 3] {
            let e = decode::<SwrodMessage>(&encode(0, &answers, frames)).unwrap_err();
            assert_eq!(e.reason(), "malformed");
        }
        assert!(decode::<SwrodMessage>(&encode(0, &answers, 2)).is_ok());
    }
}

//! The chain's messages on `swdaq-net`'s wire: TPs and link ends to the trigger, decisions and
//! credits between the trigger, the orchestrator (`dfo`) and the builders, data requests to
//! the readout and its fragments back, each fragment's bytes as a frame of its own.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use swdaq_dataflow::{RecordDone, TriggerInput};
use swdaq_format::TriggerPrimitive;
use swdaq_net::WireMessage;
use swdaq_readout::request::DataRequest;
use swdaq_readout::server::Outcome;
use swdaq_trigger::{TpBatch, TriggerControl, TriggerDecision};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChainMessage {
    /// No more messages of this stream: the trigger's decisions (to the orchestrator), the
    /// orchestrator's decisions (to a builder).
    End,
    /// A link's TPs, readout to trigger.
    Tps(WireTpBatch),
    /// A link's TP stream has ended, readout to trigger.
    LinkEnded { link: u32 },
    /// The trigger may issue this many more decisions, orchestrator to trigger.
    Credits { n: u64 },
    /// Trigger to orchestrator, and orchestrator to the builder it chose.
    Decision(TriggerDecision),
    /// A builder can take this many more records, builder to orchestrator.
    BuilderCredits { n: u64 },
    /// A builder has handed this record to storage (it is the builder's credit back).
    RecordDone { trigger_number: u64 },
    /// Builder to readout.
    Request(DataRequest),
    /// Readout to builder; followed by a frame with the fragment's bytes.
    Fragment {
        request: DataRequest,
        outcome: Outcome,
        latency_us: u64,
    },
    /// Run control to the trigger: pause, resume, a prescale or rate.
    TriggerControl(TriggerControl),
}

impl WireMessage for ChainMessage {
    const MODEL: u16 = 1;
    /// Bump on any change to [`ChainMessage`].
    const VERSION: u16 = 1;

    fn kind(&self) -> &'static str {
        match self {
            ChainMessage::End => "end",
            ChainMessage::Tps(_) => "tps",
            ChainMessage::LinkEnded { .. } => "link-ended",
            ChainMessage::Credits { .. } => "credits",
            ChainMessage::Decision(_) => "decision",
            ChainMessage::BuilderCredits { .. } => "builder-credits",
            ChainMessage::RecordDone { .. } => "record-done",
            ChainMessage::Request(_) => "request",
            ChainMessage::Fragment { .. } => "fragment",
            ChainMessage::TriggerControl(_) => "trigger-control",
        }
    }

    /// A fragment's bytes follow it.
    fn frames_after(&self) -> usize {
        match self {
            ChainMessage::Fragment { .. } => 1,
            _ => 0,
        }
    }
}

/// A [`TpBatch`] on the wire: the release time travels as wall-clock time (hosts' clocks
/// are assumed synchronised, as a DAQ's are; on one host it is exact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireTpBatch {
    pub link: u32,
    pub horizon: u64,
    pub released_unix_ns: u64,
    pub tps: Vec<TriggerPrimitive>,
}

fn unix_ns(at: Instant) -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(at.elapsed());
    since_epoch.as_nanos() as u64
}

fn instant_of(unix_ns: u64) -> Instant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let age = now.saturating_sub(Duration::from_nanos(unix_ns));
    Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
}

impl From<TpBatch> for WireTpBatch {
    fn from(b: TpBatch) -> Self {
        Self {
            link: b.link as u32,
            horizon: b.horizon,
            released_unix_ns: unix_ns(b.released_at),
            tps: b.tps,
        }
    }
}

impl From<WireTpBatch> for TpBatch {
    fn from(b: WireTpBatch) -> Self {
        Self {
            link: b.link as usize,
            tps: b.tps,
            horizon: b.horizon,
            released_at: instant_of(b.released_unix_ns),
        }
    }
}

impl From<TriggerInput> for ChainMessage {
    fn from(input: TriggerInput) -> Self {
        match input {
            TriggerInput::Tps(b) => ChainMessage::Tps(b.into()),
            TriggerInput::LinkEnded(link) => ChainMessage::LinkEnded { link: link as u32 },
            TriggerInput::Credits(n) => ChainMessage::Credits { n },
            // The trigger application is stopped by its launcher, never over the wire.
            TriggerInput::Stop => ChainMessage::End,
            TriggerInput::Control(c) => ChainMessage::TriggerControl(c),
        }
    }
}

impl From<TriggerDecision> for ChainMessage {
    fn from(d: TriggerDecision) -> Self {
        ChainMessage::Decision(d)
    }
}

impl From<RecordDone> for ChainMessage {
    fn from(d: RecordDone) -> Self {
        ChainMessage::RecordDone {
            trigger_number: d.trigger_number,
        }
    }
}

impl From<DataRequest> for ChainMessage {
    fn from(r: DataRequest) -> Self {
        ChainMessage::Request(r)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use swdaq_format::SourceId;
    use swdaq_net::wire::{decode, encode};
    use swdaq_readout::request::RequestStatus;
    use swdaq_trigger::decision::ReadoutWindow;

    fn request() -> DataRequest {
        DataRequest {
            trigger_number: 7,
            trigger_timestamp: 1000,
            run_number: 3,
            sequence_number: 0,
            source: SourceId::readout(2),
            window_begin: 900,
            window_end: 1100,
            destination: 1,
        }
    }

    pub(crate) fn every_kind() -> Vec<ChainMessage> {
        vec![
            ChainMessage::End,
            ChainMessage::Tps(WireTpBatch {
                link: 3,
                horizon: 99,
                released_unix_ns: 12345,
                tps: vec![TriggerPrimitive::default(); 3],
            }),
            ChainMessage::LinkEnded { link: 1 },
            ChainMessage::Credits { n: 8 },
            ChainMessage::Decision(TriggerDecision {
                trigger_number: 1,
                timestamp: 2,
                trigger_type: 3,
                candidates: 1,
                windows: vec![ReadoutWindow {
                    source: SourceId::readout(0),
                    begin: 1,
                    end: 2,
                }],
            }),
            ChainMessage::BuilderCredits { n: 4 },
            ChainMessage::RecordDone { trigger_number: 5 },
            ChainMessage::Request(request()),
            ChainMessage::Fragment {
                request: request(),
                outcome: Outcome::Served(RequestStatus::Complete),
                latency_us: 17,
            },
            ChainMessage::TriggerControl(TriggerControl::Pause),
            ChainMessage::TriggerControl(TriggerControl::Change(swdaq_trigger::TriggerChange {
                trigger: "random".into(),
                prescale: Some(2),
                rate_hz: Some(10.5),
            })),
        ]
    }

    #[test]
    fn a_not_a_number_rate_travels_bit_for_bit_for_the_trigger_to_refuse() {
        let m =
            ChainMessage::TriggerControl(TriggerControl::Change(swdaq_trigger::TriggerChange {
                trigger: String::new(),
                prescale: None,
                rate_hz: Some(f64::NAN),
            }));
        let bytes = encode(2, &m, 0);
        let d = decode::<ChainMessage>(&bytes).unwrap();
        assert_eq!(encode(d.sender, &d.message, d.frames_after), bytes);
    }

    #[test]
    fn a_fragment_without_its_bytes_frame_is_refused() {
        let m = ChainMessage::Fragment {
            request: request(),
            outcome: Outcome::UnknownSource,
            latency_us: 0,
        };
        let refused = |m: &ChainMessage, frames| {
            decode::<ChainMessage>(&encode(0, m, frames))
                .unwrap_err()
                .reason()
        };
        assert_eq!(refused(&m, 0), "malformed");
        assert_eq!(refused(&ChainMessage::End, 1), "malformed");
    }

    #[test]
    fn tp_batches_keep_their_release_time() {
        let released_at = Instant::now() - Duration::from_millis(250);
        let wire = WireTpBatch::from(TpBatch {
            link: 2,
            tps: vec![],
            horizon: 5,
            released_at,
        });
        let back = TpBatch::from(wire);
        let error = back.released_at.elapsed().as_secs_f64() - 0.25;
        assert!(error.abs() < 0.05, "{error}");
    }
}

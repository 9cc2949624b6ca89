//! The dataflow's messages on the wire.
//!
//! Every ZeroMQ message starts with one frame holding a fixed 12-byte header and the
//! message body:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | magic | `SWDQ`: anything else is not ours and is refused |
//! | 4..6 | version | [`PROTOCOL_VERSION`], little endian: another version is refused, never guessed at |
//! | 6..8 | frames | frames that follow this one (a fragment's bytes each; see [`Message::frames_after`]) |
//! | 8..12 | sender | the sending application's index in the topology |
//! | 12.. | body | the [`Message`], `postcard`-encoded |
//!
//! A fragment travels as a frame of its own holding its bytes as they are, handed to ZeroMQ
//! without a copy: a chain fragment after its metadata, the ROB fragments a SW ROD
//! application found after its answers, one frame each. Bodies are encoded with `postcard` (a compact, well-kept serde format);
//! the version field is what makes a change of any message a refused peer, not a misread one.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use swdaq_dataflow::{RecordDone, TriggerInput};
use swdaq_evb::message::{BuRequest, FragmentRequest, ToBu};
use swdaq_format::TriggerPrimitive;
use swdaq_readout::request::DataRequest;
use swdaq_readout::server::Outcome;
use swdaq_swrod::message::{HltRequest, RobAnswer, RobAsk, ToHlt, frames_of};
use swdaq_trigger::{TpBatch, TriggerControl, TriggerDecision};

pub const MAGIC: [u8; 4] = *b"SWDQ";
/// Bump on any change to [`Message`] or the header. 3: the event builder's messages; 4: its
/// end-of-lumi-section message and the run's last lumi section at its end; 5: the SW ROD's
/// messages, and fragments' frames counted per message.
pub const PROTOCOL_VERSION: u16 = 5;
pub const HEADER_SIZE: usize = 12;

/// An application's index in the topology (`[[topology.apps]]`, in order).
pub type AppId = u32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// "I am alive": sent on every outgoing link when it has been idle.
    Heartbeat,
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
    /// Event builder: a builder unit asks the event manager for events.
    EvbRequest(BuRequest),
    /// Event builder: assignments (event manager) or super-fragments (readout units) to a
    /// builder unit, or the end of the run.
    EvbToBu(ToBu),
    /// Event builder: a builder unit asks a readout unit for super-fragments.
    EvbFragmentRequest(FragmentRequest),
    /// SW ROD: an HLT application asks the HLT supervisor for events.
    HltRequest(HltRequest),
    /// SW ROD: L1 accepts (or the end of the run), HLT supervisor to an HLT application.
    ToHlt(ToHlt),
    /// SW ROD: the cards of a SW ROD application may send L1 accepts up to this many (the
    /// HLT supervisor's L1 accepts and how far ahead of them the cards may run).
    L1aHorizon { l1as: u64 },
    /// SW ROD: an HLT application asks a SW ROD application for ROB fragments.
    RobRequests(Vec<RobAsk>),
    /// SW ROD: a SW ROD application's answers; followed by a frame per fragment found.
    RobAnswers(Vec<RobAnswer>),
}

impl Message {
    /// The message's name, for counters and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Heartbeat => "heartbeat",
            Message::End => "end",
            Message::Tps(_) => "tps",
            Message::LinkEnded { .. } => "link-ended",
            Message::Credits { .. } => "credits",
            Message::Decision(_) => "decision",
            Message::BuilderCredits { .. } => "builder-credits",
            Message::RecordDone { .. } => "record-done",
            Message::Request(_) => "request",
            Message::Fragment { .. } => "fragment",
            Message::TriggerControl(_) => "trigger-control",
            Message::EvbRequest(_) => "evb-request",
            Message::EvbToBu(_) => "evb-to-bu",
            Message::EvbFragmentRequest(_) => "evb-fragment-request",
            Message::HltRequest(_) => "hlt-request",
            Message::ToHlt(_) => "to-hlt",
            Message::L1aHorizon { .. } => "l1a-horizon",
            Message::RobRequests(_) => "rob-requests",
            Message::RobAnswers(_) => "rob-answers",
        }
    }

    /// The frames that must follow this message: a chain fragment's bytes, a SW ROD
    /// application's fragments found.
    pub fn frames_after(&self) -> usize {
        match self {
            Message::Fragment { .. } => 1,
            Message::RobAnswers(answers) => frames_of(answers),
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

impl From<TriggerInput> for Message {
    fn from(input: TriggerInput) -> Self {
        match input {
            TriggerInput::Tps(b) => Message::Tps(b.into()),
            TriggerInput::LinkEnded(link) => Message::LinkEnded { link: link as u32 },
            TriggerInput::Credits(n) => Message::Credits { n },
            // The trigger application is stopped by its launcher, never over the wire.
            TriggerInput::Stop => Message::End,
            TriggerInput::Control(c) => Message::TriggerControl(c),
        }
    }
}

impl From<TriggerDecision> for Message {
    fn from(d: TriggerDecision) -> Self {
        Message::Decision(d)
    }
}

impl From<RecordDone> for Message {
    fn from(d: RecordDone) -> Self {
        Message::RecordDone {
            trigger_number: d.trigger_number,
        }
    }
}

impl From<DataRequest> for Message {
    fn from(r: DataRequest) -> Self {
        Message::Request(r)
    }
}

impl From<BuRequest> for Message {
    fn from(r: BuRequest) -> Self {
        Message::EvbRequest(r)
    }
}

impl From<ToBu> for Message {
    fn from(m: ToBu) -> Self {
        Message::EvbToBu(m)
    }
}

impl From<FragmentRequest> for Message {
    fn from(r: FragmentRequest) -> Self {
        Message::EvbFragmentRequest(r)
    }
}

impl From<HltRequest> for Message {
    fn from(r: HltRequest) -> Self {
        Message::HltRequest(r)
    }
}

impl From<ToHlt> for Message {
    fn from(m: ToHlt) -> Self {
        Message::ToHlt(m)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} bytes: shorter than the {HEADER_SIZE}-byte header")]
    Truncated(usize),
    #[error("not a swdaq message (starts {0:02x?})")]
    BadMagic([u8; 4]),
    #[error(
        "peer {sender} speaks protocol version {version}, this swdaq speaks {PROTOCOL_VERSION}"
    )]
    Version { sender: AppId, version: u16 },
    #[error("peer {sender}: malformed {what}: {reason}")]
    Malformed {
        sender: AppId,
        what: &'static str,
        reason: String,
    },
}

impl WireError {
    /// The counter this refusal is counted under.
    pub fn reason(&self) -> &'static str {
        match self {
            WireError::Truncated(_) | WireError::BadMagic(_) => "garbage",
            WireError::Version { .. } => "version",
            WireError::Malformed { .. } => "malformed",
        }
    }
}

/// The first frame of a message from `sender`.
pub fn encode(sender: AppId, message: &Message, frames_after: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&frames_after.to_le_bytes());
    out.extend_from_slice(&sender.to_le_bytes());
    postcard::to_io(message, &mut out).expect("writing to a Vec cannot fail");
    out
}

/// A checked first frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub sender: AppId,
    pub message: Message,
    pub frames_after: u16,
}

/// Checks and decodes a message's first frame; never panics on any input.
pub fn decode(frame: &[u8]) -> Result<Decoded, WireError> {
    if frame.len() < HEADER_SIZE {
        return Err(WireError::Truncated(frame.len()));
    }
    let word = |at: usize| [frame[at], frame[at + 1], frame[at + 2], frame[at + 3]];
    if word(0) != MAGIC {
        return Err(WireError::BadMagic(word(0)));
    }
    let version = u16::from_le_bytes([frame[4], frame[5]]);
    let frames_after = u16::from_le_bytes([frame[6], frame[7]]);
    let sender = u32::from_le_bytes(word(8));
    if version != PROTOCOL_VERSION {
        return Err(WireError::Version { sender, version });
    }
    let malformed = |reason: String| WireError::Malformed {
        sender,
        what: "body",
        reason,
    };
    let (message, rest) = postcard::take_from_bytes::<Message>(&frame[HEADER_SIZE..])
        .map_err(|e| malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(malformed(format!("{} bytes after the message", rest.len())));
    }
    let expected = message.frames_after();
    if usize::from(frames_after) != expected {
        return Err(WireError::Malformed {
            sender,
            what: "frame count",
            reason: format!(
                "a {} is followed by {expected} frames, not {frames_after}",
                message.kind()
            ),
        });
    }
    Ok(Decoded {
        sender,
        message,
        frames_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use swdaq_format::SourceId;
    use swdaq_readout::request::RequestStatus;
    use swdaq_swrod::consumers::RobRequestStatus;
    use swdaq_swrod::trigger::L1Accept;
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

    fn every_kind() -> Vec<Message> {
        vec![
            Message::Heartbeat,
            Message::End,
            Message::Tps(WireTpBatch {
                link: 3,
                horizon: 99,
                released_unix_ns: 12345,
                tps: vec![TriggerPrimitive::default(); 3],
            }),
            Message::LinkEnded { link: 1 },
            Message::Credits { n: 8 },
            Message::Decision(TriggerDecision {
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
            Message::BuilderCredits { n: 4 },
            Message::RecordDone { trigger_number: 5 },
            Message::Request(request()),
            Message::Fragment {
                request: request(),
                outcome: Outcome::Served(RequestStatus::Complete),
                latency_us: 17,
            },
            Message::TriggerControl(TriggerControl::Pause),
            Message::TriggerControl(TriggerControl::Change(swdaq_trigger::TriggerChange {
                trigger: "random".into(),
                prescale: Some(2),
                rate_hz: Some(10.5),
            })),
            Message::EvbRequest(BuRequest {
                bu: 1,
                count: 32,
                settled: vec![4, 5, 9],
            }),
            Message::EvbToBu(ToBu::Assigned(vec![swdaq_evb::message::Assignment {
                event: 3,
                trigger_ns: 1_000,
                evm_fragment: super_fragment(),
            }])),
            Message::EvbToBu(ToBu::Fragments(vec![super_fragment(); 2])),
            Message::EvbToBu(ToBu::EndOfRun { last_lumi: Some(3) }),
            Message::EvbToBu(ToBu::EndOfLumi {
                lumi: 2,
                total_events: 17,
            }),
            Message::EvbFragmentRequest(FragmentRequest {
                bu: 0,
                events: vec![3, 4],
            }),
            Message::HltRequest(HltRequest {
                hlt: 1,
                count: 64,
                settled: vec![7, 8, 12],
            }),
            Message::ToHlt(ToHlt::Assigned(vec![L1Accept {
                global_id: 9,
                l1_id: 0x0100_0002,
                bc_id: 333,
                trigger_type: 0x81,
                lumi_block: 2,
                time_seconds: 1_800_000_000,
                time_nanoseconds: 5,
            }])),
            Message::ToHlt(ToHlt::EndOfRun),
            Message::L1aHorizon { l1as: 4096 },
            Message::RobRequests(vec![RobAsk {
                source_id: 0x71_0001,
                l1_id: 5,
            }]),
            Message::RobAnswers(vec![
                answer(RobRequestStatus::Found),
                answer(RobRequestStatus::NotYet),
                answer(RobRequestStatus::Found),
            ]),
        ]
    }

    fn answer(status: RobRequestStatus) -> RobAnswer {
        RobAnswer {
            source_id: 0x71_0000,
            l1_id: 5,
            status,
            complete: true,
        }
    }

    fn super_fragment() -> swdaq_evb::message::SuperFragment {
        swdaq_evb::message::SuperFragment {
            ru: 1,
            event: 3,
            bad_feds: 0,
            data: (0..=255).collect(),
        }
    }

    #[test]
    fn every_message_survives_the_round_trip() {
        for m in every_kind() {
            let frames = m.frames_after() as u16;
            let d = decode(&encode(9, &m, frames)).unwrap();
            assert_eq!((d.sender, &d.message, d.frames_after), (9, &m, frames));
        }
    }

    #[test]
    fn a_not_a_number_rate_travels_bit_for_bit_for_the_trigger_to_refuse() {
        let m = Message::TriggerControl(TriggerControl::Change(swdaq_trigger::TriggerChange {
            trigger: String::new(),
            prescale: None,
            rate_hz: Some(f64::NAN),
        }));
        let bytes = encode(2, &m, 0);
        let d = decode(&bytes).unwrap();
        assert_eq!(encode(d.sender, &d.message, d.frames_after), bytes);
    }

    #[test]
    fn another_version_is_refused_naming_both() {
        let mut frame = encode(4, &Message::Heartbeat, 0);
        let other = PROTOCOL_VERSION + 1;
        frame[4..6].copy_from_slice(&other.to_le_bytes());
        let e = decode(&frame).unwrap_err();
        assert_eq!(
            e,
            WireError::Version {
                sender: 4,
                version: other
            }
        );
        assert!(e.to_string().contains(&format!("version {other}")), "{e}");
        assert_eq!(e.reason(), "version");
    }

    #[test]
    fn a_fragment_without_its_bytes_frame_is_refused() {
        let m = Message::Fragment {
            request: request(),
            outcome: Outcome::UnknownSource,
            latency_us: 0,
        };
        assert_eq!(decode(&encode(0, &m, 0)).unwrap_err().reason(), "malformed");
        assert_eq!(
            decode(&encode(0, &Message::End, 1)).unwrap_err().reason(),
            "malformed"
        );
        // Two fragments found: two frames, not one, not three.
        let answers = Message::RobAnswers(vec![
            answer(RobRequestStatus::Found),
            answer(RobRequestStatus::Gone),
            answer(RobRequestStatus::Found),
        ]);
        for frames in [0, 1, 3] {
            let e = decode(&encode(0, &answers, frames)).unwrap_err();
            assert_eq!(e.reason(), "malformed");
        }
        assert!(decode(&encode(0, &answers, 2)).is_ok());
    }

    #[test]
    fn garbage_and_short_frames_are_refused() {
        assert_eq!(
            decode(b"GET / HTTP/1.1\r\n").unwrap_err().reason(),
            "garbage"
        );
        assert_eq!(decode(b"SWDQ").unwrap_err(), WireError::Truncated(4));
        let mut trailing = encode(0, &Message::Heartbeat, 0);
        trailing.push(0);
        assert_eq!(decode(&trailing).unwrap_err().reason(), "malformed");
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

    proptest! {
        /// Any bytes, and any valid message cut or with a byte changed: a message or an
        /// error, never a panic.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            pick in any::<usize>(),
            cut in 0usize..512,
            flip in any::<(usize, u8)>(),
        ) {
            let _ = decode(&bytes);
            let kinds = every_kind();
            let m = &kinds[pick % kinds.len()];
            let mut frame = encode(1, m, m.frames_after() as u16);
            let at = flip.0 % frame.len();
            frame[at] ^= flip.1;
            let _ = decode(&frame);
            frame.truncate(cut % (frame.len() + 1));
            let _ = decode(&frame);
        }
    }
}

//! Messages on the wire: the framework's header around any model's messages.
//!
//! Every ZeroMQ message starts with one frame holding a fixed 16-byte header and the
//! message body:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | magic | `SWDQ`: anything else is not ours and is refused |
//! | 4..6 | version | [`PROTOCOL_VERSION`], little endian: another version is refused, never guessed at |
//! | 6..8 | frames | frames that follow this one (a fragment's bytes each; see [`WireMessage::frames_after`]) |
//! | 8..12 | sender | the sending application's index in the topology |
//! | 12..14 | model | the wire id of the model whose message this is ([`WireMessage::MODEL`]; 0: the framework's own, [`Framework`]) |
//! | 14..16 | model version | that model's message version ([`WireMessage::VERSION`]) |
//! | 16.. | body | the model's message, `postcard`-encoded |
//!
//! Each model owns its messages: one enum implementing [`WireMessage`], in the model's folder.
//! [`PROTOCOL_VERSION`] covers the header and the framework's messages; a model bumps its own
//! `VERSION` when its messages change, so a peer of another model, or of another version of
//! this one, is refused by name, never misread.
//!
//! A fragment travels as a frame of its own holding its bytes as they are, handed to ZeroMQ
//! without a copy: a chain fragment after its metadata, the ROB fragments a SW ROD
//! application found after its answers, one frame each. Bodies are encoded with `postcard` (a
//! compact, well-kept serde format).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 4] = *b"SWDQ";
/// Bump on any change to the header or to [`Framework`]'s messages. 3: the event builder's
/// messages; 4: its end-of-lumi-section message and the run's last lumi section at its end;
/// 5: the SW ROD's messages, and fragments' frames counted per message; 6: the model's wire
/// id and message version in the header, each model's messages versioned by the model.
pub const PROTOCOL_VERSION: u16 = 6;
pub const HEADER_SIZE: usize = 16;
/// The header up to and including the protocol version: all that is read of another
/// version's header, whose length may differ.
const VERSION_END: usize = 6;

/// An application's index in the topology (`[[topology.apps]]`, in order).
pub type AppId = u32;

/// A model's messages: one enum per model, sent through `Outlet<M>`, taken by `Inlet<M>`.
pub trait WireMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The model's wire id, unique among the models (0 is the framework's).
    const MODEL: u16;
    /// The model's message version: bump on any change to its messages.
    const VERSION: u16;
    /// The message's name, for counters and errors.
    fn kind(&self) -> &'static str;
    /// The frames that must follow this message (a fragment's bytes each).
    fn frames_after(&self) -> usize {
        0
    }
}

/// The framework's own messages (model 0), taken by every inlet whatever its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Framework {
    /// "I am alive": sent on every outgoing link when it has been idle.
    Heartbeat,
}

impl WireMessage for Framework {
    const MODEL: u16 = 0;
    /// Versioned by [`PROTOCOL_VERSION`].
    const VERSION: u16 = PROTOCOL_VERSION;

    fn kind(&self) -> &'static str {
        match self {
            Framework::Heartbeat => "heartbeat",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} bytes: shorter than the {HEADER_SIZE}-byte header")]
    Truncated(usize),
    #[error("not a swdaq message (starts {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("peer {} speaks protocol version {version}, this swdaq speaks {PROTOCOL_VERSION}", name_of(*.sender))]
    Version {
        /// `None` when the other version's header is too short to hold a sender.
        sender: Option<AppId>,
        version: u16,
    },
    #[error("peer {sender} sent a message of model {model}, this inbox takes model {expected}'s")]
    Model {
        sender: AppId,
        model: u16,
        expected: u16,
    },
    #[error(
        "peer {sender} speaks model {model}'s message version {version}, this swdaq speaks {expected}"
    )]
    ModelVersion {
        sender: AppId,
        model: u16,
        version: u16,
        expected: u16,
    },
    #[error("peer {sender}: malformed {what}: {reason}")]
    Malformed {
        sender: AppId,
        what: &'static str,
        reason: String,
    },
}

fn name_of(sender: Option<AppId>) -> String {
    sender.map_or_else(|| "(unnamed)".into(), |s| s.to_string())
}

impl WireError {
    /// The counter this refusal is counted under.
    pub fn reason(&self) -> &'static str {
        match self {
            WireError::Truncated(_) | WireError::BadMagic(_) => "garbage",
            WireError::Version { .. } => "version",
            WireError::Model { .. } => "model",
            WireError::ModelVersion { .. } => "model_version",
            WireError::Malformed { .. } => "malformed",
        }
    }
}

/// The first frame of message `message` from `sender`, announcing `frames_after` frames.
pub fn encode<M: WireMessage>(sender: AppId, message: &M, frames_after: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&frames_after.to_le_bytes());
    out.extend_from_slice(&sender.to_le_bytes());
    out.extend_from_slice(&M::MODEL.to_le_bytes());
    out.extend_from_slice(&M::VERSION.to_le_bytes());
    postcard::to_io(message, &mut out).expect("writing to a Vec cannot fail");
    out
}

/// A checked header: the magic and protocol version are this swdaq's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub frames_after: u16,
    pub sender: AppId,
    pub model: u16,
    pub model_version: u16,
}

impl Header {
    /// Checks a message's first frame up to its body; never panics on any input. Another
    /// protocol version is named before the length is judged: its header may be another size.
    pub fn read(frame: &[u8]) -> Result<Self, WireError> {
        let word = |at: usize| [frame[at], frame[at + 1], frame[at + 2], frame[at + 3]];
        let half = |at: usize| u16::from_le_bytes([frame[at], frame[at + 1]]);
        if frame.len() < VERSION_END {
            return Err(WireError::Truncated(frame.len()));
        }
        if word(0) != MAGIC {
            return Err(WireError::BadMagic(word(0)));
        }
        let version = half(4);
        if version != PROTOCOL_VERSION {
            let sender = (frame.len() >= 12).then(|| u32::from_le_bytes(word(8)));
            return Err(WireError::Version { sender, version });
        }
        if frame.len() < HEADER_SIZE {
            return Err(WireError::Truncated(frame.len()));
        }
        Ok(Self {
            frames_after: half(6),
            sender: u32::from_le_bytes(word(8)),
            model: half(12),
            model_version: half(14),
        })
    }

    /// The model the header names: `Some(true)` [`Framework`]'s, `Some(false)` `M`'s, refused
    /// for any other model or another version of either.
    pub fn is_framework<M: WireMessage>(&self) -> Result<bool, WireError> {
        if self.model == Framework::MODEL {
            self.check::<Framework>().map(|()| true)
        } else {
            self.check::<M>().map(|()| false)
        }
    }

    fn check<M: WireMessage>(&self) -> Result<(), WireError> {
        if self.model != M::MODEL {
            return Err(WireError::Model {
                sender: self.sender,
                model: self.model,
                expected: M::MODEL,
            });
        }
        if self.model_version != M::VERSION {
            return Err(WireError::ModelVersion {
                sender: self.sender,
                model: self.model,
                version: self.model_version,
                expected: M::VERSION,
            });
        }
        Ok(())
    }
}

/// A checked first frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<M> {
    pub sender: AppId,
    pub message: M,
    pub frames_after: u16,
}

/// Checks and decodes a message of model `M` (the framework's: `M` = [`Framework`]); never
/// panics on any input.
pub fn decode<M: WireMessage>(frame: &[u8]) -> Result<Decoded<M>, WireError> {
    let header = Header::read(frame)?;
    header.check::<M>()?;
    decode_body(&header, frame)
}

/// Decodes the body of `frame`, whose header `header` has been read and checked for `M`.
pub fn decode_body<M: WireMessage>(header: &Header, frame: &[u8]) -> Result<Decoded<M>, WireError> {
    let sender = header.sender;
    let malformed = |reason: String| WireError::Malformed {
        sender,
        what: "body",
        reason,
    };
    let (message, rest) = postcard::take_from_bytes::<M>(&frame[HEADER_SIZE..])
        .map_err(|e| malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(malformed(format!("{} bytes after the message", rest.len())));
    }
    let expected = message.frames_after();
    let frames_after = header.frames_after;
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

    /// A model of the tests' own: one plain message, one followed by frames.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Probe {
        End,
        Rate(f64),
        Pieces(Vec<bool>),
    }

    impl WireMessage for Probe {
        const MODEL: u16 = 40;
        const VERSION: u16 = 3;
        fn kind(&self) -> &'static str {
            match self {
                Probe::End => "end",
                Probe::Rate(_) => "rate",
                Probe::Pieces(_) => "pieces",
            }
        }
        /// A frame per piece that is there.
        fn frames_after(&self) -> usize {
            match self {
                Probe::Pieces(there) => there.iter().filter(|&&t| t).count(),
                _ => 0,
            }
        }
    }

    /// Another model, for the refusals of a model's messages sent to another model's inbox.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Stranger;

    impl WireMessage for Stranger {
        const MODEL: u16 = 41;
        const VERSION: u16 = 3;
        fn kind(&self) -> &'static str {
            "stranger"
        }
    }

    fn every_kind() -> Vec<Probe> {
        vec![
            Probe::End,
            Probe::Rate(10.5),
            Probe::Pieces(vec![true, false, true]),
        ]
    }

    #[test]
    fn every_message_survives_the_round_trip() {
        for m in every_kind() {
            let frames = m.frames_after() as u16;
            let d = decode::<Probe>(&encode(9, &m, frames)).unwrap();
            assert_eq!((d.sender, &d.message, d.frames_after), (9, &m, frames));
        }
        let d = decode::<Framework>(&encode(3, &Framework::Heartbeat, 0)).unwrap();
        assert_eq!((d.sender, d.message), (3, Framework::Heartbeat));
    }

    #[test]
    fn the_header_is_16_bytes_and_names_the_model_and_its_version() {
        let frame = encode(0x0102_0304, &Probe::End, 0);
        assert_eq!(&frame[..4], b"SWDQ");
        assert_eq!(frame[4..6], PROTOCOL_VERSION.to_le_bytes());
        assert_eq!(frame[8..12], 0x0102_0304u32.to_le_bytes());
        assert_eq!(frame[12..14], 40u16.to_le_bytes());
        assert_eq!(frame[14..16], 3u16.to_le_bytes());
        assert_eq!(frame.len(), HEADER_SIZE + 1);
    }

    #[test]
    fn a_not_a_number_rate_travels_bit_for_bit() {
        let m = Probe::Rate(f64::NAN);
        let bytes = encode(2, &m, 0);
        let d = decode::<Probe>(&bytes).unwrap();
        assert_eq!(encode(d.sender, &d.message, d.frames_after), bytes);
    }

    #[test]
    fn another_version_is_refused_naming_both() {
        let mut frame = encode(4, &Framework::Heartbeat, 0);
        let other = PROTOCOL_VERSION + 1;
        frame[4..6].copy_from_slice(&other.to_le_bytes());
        let e = decode::<Framework>(&frame).unwrap_err();
        assert_eq!(
            e,
            WireError::Version {
                sender: Some(4),
                version: other
            }
        );
        assert!(e.to_string().contains(&format!("version {other}")), "{e}");
        assert_eq!(e.reason(), "version");
        // Another version's shorter header is still that version, not garbage.
        frame.truncate(9);
        assert_eq!(
            decode::<Probe>(&frame).unwrap_err(),
            WireError::Version {
                sender: None,
                version: other
            }
        );
    }

    #[test]
    fn another_model_s_message_is_refused_naming_both_models() {
        let e = decode::<Probe>(&encode(5, &Stranger, 0)).unwrap_err();
        assert_eq!(
            e,
            WireError::Model {
                sender: 5,
                model: 41,
                expected: 40
            }
        );
        assert_eq!(e.reason(), "model");
        assert!(e.to_string().contains("model 41"), "{e}");
        // The framework's messages are every model's; no model's are the framework's.
        let header = Header::read(&encode(5, &Framework::Heartbeat, 0)).unwrap();
        assert_eq!(header.is_framework::<Probe>(), Ok(true));
        let header = Header::read(&encode(5, &Probe::End, 0)).unwrap();
        assert_eq!(header.is_framework::<Probe>(), Ok(false));
        assert_eq!(
            decode::<Framework>(&encode(5, &Probe::End, 0))
                .unwrap_err()
                .reason(),
            "model"
        );
    }

    #[test]
    fn another_version_of_the_model_s_messages_is_refused_naming_both() {
        let mut frame = encode(6, &Probe::End, 0);
        frame[14..16].copy_from_slice(&4u16.to_le_bytes());
        let e = decode::<Probe>(&frame).unwrap_err();
        assert_eq!(
            e,
            WireError::ModelVersion {
                sender: 6,
                model: 40,
                version: 4,
                expected: 3
            }
        );
        assert_eq!(e.reason(), "model_version");
        let header = Header::read(&frame).unwrap();
        assert_eq!(header.is_framework::<Probe>().unwrap_err(), e);
        // The framework's messages are versioned by the protocol.
        let mut heartbeat = encode(6, &Framework::Heartbeat, 0);
        heartbeat[14] ^= 1;
        let e = decode::<Framework>(&heartbeat).unwrap_err();
        assert_eq!(e.reason(), "model_version");
    }

    #[test]
    fn a_message_without_its_frames_is_refused() {
        assert_eq!(
            decode::<Probe>(&encode(0, &Probe::End, 1))
                .unwrap_err()
                .reason(),
            "malformed"
        );
        // Two pieces there: two frames, not one, not three.
        let pieces = Probe::Pieces(vec![true, false, true]);
        for frames in [0, 1, 3] {
            let e = decode::<Probe>(&encode(0, &pieces, frames)).unwrap_err();
            assert_eq!(e.reason(), "malformed");
        }
        assert!(decode::<Probe>(&encode(0, &pieces, 2)).is_ok());
    }

    #[test]
    fn garbage_and_short_frames_are_refused() {
        assert_eq!(
            decode::<Probe>(b"GET / HTTP/1.1\r\n").unwrap_err().reason(),
            "garbage"
        );
        assert_eq!(
            decode::<Probe>(b"SWDQ").unwrap_err(),
            WireError::Truncated(4)
        );
        let whole = encode(0, &Probe::End, 0);
        for cut in 0..HEADER_SIZE {
            let e = decode::<Probe>(&whole[..cut]).unwrap_err();
            assert_eq!(e, WireError::Truncated(cut));
            assert!(e.to_string().contains("16-byte header"), "{e}");
        }
        let mut trailing = encode(0, &Framework::Heartbeat, 0);
        trailing.push(0);
        assert_eq!(
            decode::<Framework>(&trailing).unwrap_err().reason(),
            "malformed"
        );
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
            let _ = decode::<Probe>(&bytes);
            let _ = decode::<Framework>(&bytes);
            let kinds = every_kind();
            let m = &kinds[pick % kinds.len()];
            let mut frame = encode(1, m, m.frames_after() as u16);
            let at = flip.0 % frame.len();
            frame[at] ^= flip.1;
            let _ = decode::<Probe>(&frame);
            frame.truncate(cut % (frame.len() + 1));
            let _ = decode::<Probe>(&frame);
        }

        /// Any model id or model version other than the inbox's is refused under its own
        /// reason, and a header cut anywhere is a short frame, whatever the sender.
        #[test]
        fn a_wrong_model_or_model_version_or_a_cut_header_is_named(
            model in any::<u16>(),
            version in any::<u16>(),
            sender in any::<u32>(),
            cut in 0usize..HEADER_SIZE,
        ) {
            let mut frame = encode(sender, &Probe::End, 0);
            frame[12..14].copy_from_slice(&model.to_le_bytes());
            frame[14..16].copy_from_slice(&version.to_le_bytes());
            let reason = match decode::<Probe>(&frame) {
                Ok(_) => "none",
                Err(e) => e.reason(),
            };
            let expected = if model != Probe::MODEL {
                "model"
            } else if version != Probe::VERSION {
                "model_version"
            } else {
                "none"
            };
            prop_assert_eq!(reason, expected);
            prop_assert_eq!(decode::<Probe>(&frame[..cut]), Err(WireError::Truncated(cut)));
        }
    }
}

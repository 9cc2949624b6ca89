//! The messages between a FELIX server and its subscribers, over one TCP connection each.
//!
//! FELIX's own software (felix-star publishing over netio-next/netio3) is connection
//! oriented and message based: a client subscribes to e-links (FIDs), the server publishes
//! their data coalesced into network buffers, a slow client holds the sender back, a lost
//! connection is re-established by the client. This protocol does the same over plain TCP
//! with swdaq's own framing (FELIX's netio layout is not followed): a subscriber sends one
//! `Subscribe` listing its e-links, the server answers `Subscribed` (or `Refused` with why),
//! then sends `Blocks` messages, each whole to-host blocks of the subscribed e-links in the
//! order the card completed them, and at the end `End` with what it sent.
//!
//! Every message starts with a 16-byte header (little-endian):
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..4   | magic `FXPB` |
//! | 4..6   | protocol version ([`VERSION`]) |
//! | 6..8   | kind ([`Kind`]) |
//! | 8..12  | payload bytes after the header |
//! | 12..16 | sequence number: the sender's messages on this connection, from 0 |
//!
//! Payloads: `Subscribe`: e-link numbers, u16 each (1..=2048 of them); `Subscribed`: card
//! (u16), data e-links (u16), TTC-to-host on (u8), the card's block size in KiB (u8: 1 in
//! GBT mode, 1 to 64 in FULL mode), 2 bytes 0; `Refused`: UTF-8 text (up to 1 KiB); `Blocks`:
//! whole blocks of that size, at most [`MAX_PAYLOAD`] bytes; `End`: blocks sent on this
//! connection (u64), L1 accepts the card made (u64). Version 1 had no block size (GBT mode's
//! 1 KiB blocks only).

use swdaq_format::FormatError;
use swdaq_format::felix::MAX_ELINK;

pub const MAGIC: [u8; 4] = *b"FXPB";
pub const VERSION: u16 = 2;
pub const HEADER_SIZE: usize = 16;
/// Most bytes of blocks one `Blocks` message carries.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Block sizes are whole KiB: a `Blocks` payload is checked against that before the card's
/// own size is known; the subscriber checks it against the card's.
const KIB: usize = 1024;
/// The largest block a card may announce (FULL mode's 64 KiB).
const MAX_BLOCK_KIB: u8 = 64;
const MAX_REFUSAL: usize = 1024;
const MAX_SUBSCRIBED_ELINKS: usize = MAX_ELINK as usize + 1;
pub const SUBSCRIBED_SIZE: usize = 8;
pub const END_SIZE: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Subscribe = 1,
    Subscribed = 2,
    Refused = 3,
    Blocks = 4,
    End = 5,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Subscribe,
            2 => Self::Subscribed,
            3 => Self::Refused,
            4 => Self::Blocks,
            5 => Self::End,
            _ => return None,
        })
    }

    /// Whether a payload of `len` bytes is one this kind can have.
    fn fits(self, len: usize) -> bool {
        match self {
            Self::Subscribe => {
                len >= 2 && len.is_multiple_of(2) && len / 2 <= MAX_SUBSCRIBED_ELINKS
            }
            Self::Subscribed => len == SUBSCRIBED_SIZE,
            Self::Refused => len <= MAX_REFUSAL,
            Self::Blocks => len >= KIB && len.is_multiple_of(KIB) && len <= MAX_PAYLOAD,
            Self::End => len == END_SIZE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub len: usize,
    pub sequence: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[8..12].copy_from_slice(&(self.len as u32).to_le_bytes());
        b[12..16].copy_from_slice(&self.sequence.to_le_bytes());
        b
    }

    /// Reads a header: a foreign magic, another version, an unknown kind or a length the
    /// kind cannot have is an error (the stream cannot be followed past it).
    pub fn parse(b: &[u8; HEADER_SIZE]) -> Result<Self, FormatError> {
        const WHAT: &str = "FELIX publication header";
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b[0..4] != MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                expected: u32::from_le_bytes(MAGIC),
                got: word(0),
            });
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                supported: u32::from(VERSION),
                got: u32::from(version),
            });
        }
        let kind_bits = u16::from_le_bytes([b[6], b[7]]);
        let kind = Kind::from_u16(kind_bits).ok_or(FormatError::Inconsistent {
            what: WHAT,
            field: "kind",
            value: u64::from(kind_bits),
        })?;
        let len = word(8) as usize;
        if !kind.fits(len) {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "payload length",
                value: len as u64,
            });
        }
        Ok(Self {
            kind,
            len,
            sequence: word(12),
        })
    }
}

/// What a server tells a subscriber it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscribed {
    pub card: u16,
    pub elinks: u16,
    pub ttc_to_host: bool,
    /// The card's to-host block size in bytes (whole KiB).
    pub block_size: usize,
}

impl Subscribed {
    pub fn encode(&self) -> [u8; SUBSCRIBED_SIZE] {
        let mut b = [0u8; SUBSCRIBED_SIZE];
        b[0..2].copy_from_slice(&self.card.to_le_bytes());
        b[2..4].copy_from_slice(&self.elinks.to_le_bytes());
        b[4] = u8::from(self.ttc_to_host);
        b[5] = (self.block_size / KIB) as u8;
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "FELIX Subscribed message";
        if b.len() != SUBSCRIBED_SIZE
            || b[4] > 1
            || !(1..=MAX_BLOCK_KIB).contains(&b[5])
            || b[6..].iter().any(|&x| x != 0)
        {
            return Err(FormatError::Inconsistent {
                what: WHAT,
                field: "payload",
                value: b.len() as u64,
            });
        }
        Ok(Self {
            card: u16::from_le_bytes([b[0], b[1]]),
            elinks: u16::from_le_bytes([b[2], b[3]]),
            ttc_to_host: b[4] == 1,
            block_size: usize::from(b[5]) * KIB,
        })
    }
}

/// What a server sent on a connection, told at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct End {
    pub blocks: u64,
    pub l1as: u64,
}

impl End {
    pub fn encode(&self) -> [u8; END_SIZE] {
        let mut b = [0u8; END_SIZE];
        b[0..8].copy_from_slice(&self.blocks.to_le_bytes());
        b[8..16].copy_from_slice(&self.l1as.to_le_bytes());
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, FormatError> {
        let b: &[u8; END_SIZE] = b.try_into().map_err(|_| FormatError::Inconsistent {
            what: "FELIX End message",
            field: "payload",
            value: b.len() as u64,
        })?;
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Self {
            blocks: word(0),
            l1as: word(8),
        })
    }
}

/// A `Subscribe` payload's e-link numbers; one beyond 11 bits is an error.
pub fn parse_elinks(b: &[u8]) -> Result<Vec<u16>, FormatError> {
    b.chunks_exact(2)
        .map(|w| {
            let e = u16::from_le_bytes([w[0], w[1]]);
            if e > MAX_ELINK {
                Err(FormatError::Inconsistent {
                    what: "FELIX Subscribe message",
                    field: "e-link",
                    value: u64::from(e),
                })
            } else {
                Ok(e)
            }
        })
        .collect()
}

pub fn encode_elinks(elinks: &[u16]) -> Vec<u8> {
    elinks.iter().flat_map(|e| e.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lengths_a_kind_cannot_have_are_refused() {
        let header = |kind, len| Header {
            kind,
            len,
            sequence: 7,
        };
        for (kind, len) in [
            (Kind::Blocks, 0),
            (Kind::Blocks, 1000),
            (Kind::Blocks, MAX_PAYLOAD + KIB),
            (Kind::Subscribe, 3),
            (Kind::Subscribe, 0),
            (Kind::End, 8),
            (Kind::Refused, 5000),
        ] {
            assert!(
                Header::parse(&header(kind, len).encode()).is_err(),
                "{kind:?} {len}"
            );
        }
        let ok = header(Kind::Blocks, 64 * KIB);
        assert_eq!(Header::parse(&ok.encode()), Ok(ok));
        let mut version_1 = ok.encode();
        version_1[4] = 1;
        assert!(matches!(
            Header::parse(&version_1),
            Err(FormatError::UnsupportedVersion { got: 1, .. })
        ));
        assert!(parse_elinks(&encode_elinks(&[1, 0x800])).is_err());
    }

    #[test]
    fn a_card_s_block_size_is_whole_kib_from_1_to_64() {
        let card = |kib: u8| {
            let mut b = Subscribed {
                card: 1,
                elinks: 12,
                ttc_to_host: true,
                block_size: KIB,
            }
            .encode();
            b[5] = kib;
            Subscribed::parse(&b)
        };
        assert_eq!(card(4).unwrap().block_size, 4096);
        assert_eq!(card(64).unwrap().block_size, 64 * KIB);
        assert!(card(0).is_err() && card(65).is_err());
    }

    proptest! {
        #[test]
        fn headers_and_payloads_round_trip(kind in 1u16..=5, blocks in 1usize..=MAX_PAYLOAD / KIB, sequence in any::<u32>(), card in any::<u16>(), elinks in any::<u16>(), ttc in any::<bool>(), block_kib in 1usize..=64, sent in any::<u64>(), l1as in any::<u64>()) {
            let kind = Kind::from_u16(kind).unwrap();
            let len = match kind {
                Kind::Subscribe => 2 * (blocks % MAX_SUBSCRIBED_ELINKS + 1),
                Kind::Subscribed => SUBSCRIBED_SIZE,
                Kind::Refused => blocks % MAX_REFUSAL,
                Kind::Blocks => blocks * KIB,
                Kind::End => END_SIZE,
            };
            let h = Header { kind, len, sequence };
            prop_assert_eq!(Header::parse(&h.encode()), Ok(h));
            let s = Subscribed { card, elinks, ttc_to_host: ttc, block_size: block_kib * KIB };
            prop_assert_eq!(Subscribed::parse(&s.encode()), Ok(s));
            let e = End { blocks: sent, l1as };
            prop_assert_eq!(End::parse(&e.encode()), Ok(e));
        }

        #[test]
        fn garbage_is_read_or_refused_never_a_panic(b in proptest::collection::vec(any::<u8>(), HEADER_SIZE..=HEADER_SIZE), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b: [u8; HEADER_SIZE] = b.try_into().unwrap();
            if let Ok(h) = Header::parse(&b) {
                prop_assert!(h.kind.fits(h.len));
                prop_assert_eq!(h.encode(), b);
            }
            let _ = Subscribed::parse(&payload);
            let _ = End::parse(&payload);
            let _ = parse_elinks(&payload);
        }
    }
}

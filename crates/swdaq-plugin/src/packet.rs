//! The no-code input format: a front end's packets described in configuration — framing by
//! fixed size or by a length field, header fields at offsets with width and byte order, an
//! optional magic word and CRC — decoded through the same [`Decoder`] trait as a plugin.
//!
//! ```toml
//! framing = "length_field"
//! header_bytes = 20
//! magic = { offset = 0, width = 2, order = "big", value = 0xB0A4 }
//! source_id = { offset = 2, width = 2, order = "big" }
//! event_number = { offset = 4, width = 4, order = "big" }
//! timestamp = { offset = 8, width = 8, order = "big" }
//! length = { offset = 16, width = 4, order = "big" }   # payload bytes after the header
//! crc = { kind = "crc32c", at = -4, order = "little", over = [0, -4] }  # a CRC trailer
//! ```
//!
//! Resynchronisation: a position whose header fails a check (magic, a length outside the
//! packet limits, the CRC) is not a packet; the decoder moves on byte by byte until one passes,
//! and counts the bytes skipped. Without a magic word or a CRC, little tells garbage from a
//! header: configure one of them for a link that can lose bytes.

use serde::Deserialize;

use crate::decode::{DecodeError, Decoder, Fragment};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Every packet is `packet_bytes` long.
    Fixed,
    /// The header's `length` field says how long the packet is.
    LengthField,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ByteOrder {
    Big,
    Little,
}

/// An unsigned integer in the header: `width` bytes (1, 2, 4 or 8) at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub offset: usize,
    pub width: usize,
    pub order: ByteOrder,
}

/// A header field that must hold `value` for the position to be a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MagicField {
    pub offset: usize,
    pub width: usize,
    pub order: ByteOrder,
    pub value: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrcKind {
    /// CRC-32 (ISO-HDLC: Ethernet, zlib).
    Crc32,
    /// CRC-32C (Castagnoli: iSCSI, ext4).
    Crc32c,
}

/// A 4-byte CRC stored `at` a position of the packet, computed over the bytes `over = [from,
/// to)`. Positions `>= 0` count from the packet's start, negative ones back from its end
/// (`at = -4`: the last 4 bytes); `to = 0` is the packet's end (an empty range is useless, so
/// 0 cannot mean the start there). `over = [0, 12]`: a header CRC; `over = [0, -4]`: all but
/// a CRC trailer; `over = [20, 0]`: the payload after a 20-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrcField {
    pub kind: CrcKind,
    pub at: i64,
    pub order: ByteOrder,
    pub over: [i64; 2],
}

/// A packet format as configured: its own TOML table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacketFormatConfig {
    pub framing: Framing,
    pub header_bytes: usize,
    /// Fixed framing: every packet's size.
    pub packet_bytes: Option<usize>,
    /// Length framing: whether `length` counts the header too (otherwise only what follows it).
    #[serde(default)]
    pub length_includes_header: bool,
    /// Length framing: a longer packet is taken as garbage.
    #[serde(default = "default_max_packet_bytes")]
    pub max_packet_bytes: usize,
    pub magic: Option<MagicField>,
    pub source_id: Option<Field>,
    pub event_number: Option<Field>,
    pub timestamp: Option<Field>,
    pub length: Option<Field>,
    pub crc: Option<CrcField>,
}

// Built once: a `Crc` computes its table when made.
static CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
static CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

fn default_max_packet_bytes() -> usize {
    65536
}

/// A configuration that cannot describe packets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("packet format: {0}")]
    Toml(String),
    #[error("packet format: header_bytes must be at least 1")]
    EmptyHeader,
    #[error("packet format: {field}: width {width} is not 1, 2, 4 or 8")]
    BadWidth { field: &'static str, width: usize },
    #[error(
        "packet format: {field}: bytes {offset}..{end} are beyond the {header_bytes}-byte header"
    )]
    OutsideHeader {
        field: &'static str,
        offset: usize,
        end: usize,
        header_bytes: usize,
    },
    #[error("packet format: magic value {value:#x} does not fit in {width} bytes")]
    MagicTooWide { value: u64, width: usize },
    #[error("packet format: fixed framing needs packet_bytes")]
    NoPacketBytes,
    #[error("packet format: length_field framing needs a length field")]
    NoLengthField,
    #[error("packet format: {what} {bytes} is smaller than the {min}-byte minimum packet")]
    PacketTooSmall {
        what: &'static str,
        bytes: usize,
        min: usize,
    },
    #[error("packet format: crc: over [{from}, {to}] is empty or reversed")]
    BadCrcRange { from: i64, to: i64 },
    #[error("packet format: crc: at = {at} leaves no room for its 4 bytes")]
    BadCrcPosition { at: i64 },
}

/// Why bytes of a block were not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("{bytes} bytes of garbage at byte {offset} ({reason}) skipped")]
    Garbage {
        offset: usize,
        bytes: usize,
        reason: NotAPacket,
    },
}

/// What a position failed to be a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAPacket {
    #[error("magic word differs")]
    Magic,
    #[error("length out of range")]
    Length,
    #[error("CRC mismatch")]
    Crc,
}

/// What a [`PacketFormat`] decoded and skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketCounts {
    pub packets: u64,
    /// Runs of skipped bytes, by what their first position failed.
    pub bad_magic: u64,
    pub bad_length: u64,
    pub crc_mismatch: u64,
    pub garbage_bytes: u64,
}

/// A configured packet format: a [`Decoder`] with no plugin.
#[derive(Debug, Clone)]
pub struct PacketFormat {
    config: PacketFormatConfig,
    /// No packet can be shorter: the header, and the CRC's position and range.
    min_packet_bytes: usize,
    /// The CRC and all it covers lie in the header: checked before the packet's length is
    /// believed, so a damaged length does not make the decoder wait for bytes that never come.
    header_crc: bool,
    counts: PacketCounts,
}

impl PacketFormat {
    /// Parses a format's TOML table (its text) and checks it.
    pub fn from_toml(text: &str) -> Result<PacketFormat, ConfigError> {
        let config: PacketFormatConfig =
            toml::from_str(text).map_err(|e| ConfigError::Toml(e.message().to_string()))?;
        PacketFormat::new(config)
    }

    /// Checks `config`: widths legal, every field within the header, the framing's own keys.
    pub fn new(config: PacketFormatConfig) -> Result<PacketFormat, ConfigError> {
        let header_bytes = config.header_bytes;
        if header_bytes == 0 {
            return Err(ConfigError::EmptyHeader);
        }
        let mut fields: Vec<(&'static str, usize, usize)> = [
            ("source_id", config.source_id),
            ("event_number", config.event_number),
            ("timestamp", config.timestamp),
            ("length", config.length),
        ]
        .into_iter()
        .filter_map(|(name, field)| field.map(|f| (name, f.offset, f.width)))
        .collect();
        if let Some(magic) = config.magic {
            fields.push(("magic", magic.offset, magic.width));
        }
        for (field, offset, width) in fields {
            if ![1, 2, 4, 8].contains(&width) {
                return Err(ConfigError::BadWidth { field, width });
            }
            let end = offset.saturating_add(width);
            if end > header_bytes {
                return Err(ConfigError::OutsideHeader {
                    field,
                    offset,
                    end,
                    header_bytes,
                });
            }
        }
        if let Some(magic) = config.magic
            && magic.width < 8
            && magic.value >> (8 * magic.width) != 0
        {
            return Err(ConfigError::MagicTooWide {
                value: magic.value,
                width: magic.width,
            });
        }
        let mut min_packet_bytes = header_bytes;
        if let Some(crc) = config.crc {
            let [from, to] = crc.over;
            // Positions on the same side can be compared now; mixed ones only per packet.
            let same_side = (from >= 0) == (to > 0);
            if same_side && from >= to {
                return Err(ConfigError::BadCrcRange { from, to });
            }
            if (-3..0).contains(&crc.at) {
                return Err(ConfigError::BadCrcPosition { at: crc.at });
            }
            // The shortest packet holding the CRC's 4 bytes and the start and end of its range.
            let crc_room = if crc.at >= 0 {
                crc.at.saturating_add(4)
            } else {
                crc.at.saturating_neg()
            };
            let from_room = if from >= 0 {
                from
            } else {
                from.saturating_neg()
            };
            let to_room = if to > 0 { to } else { to.saturating_neg() };
            let room = crc_room.max(from_room).max(to_room);
            min_packet_bytes = min_packet_bytes.max(usize::try_from(room).unwrap_or(usize::MAX));
        }
        match config.framing {
            Framing::Fixed => {
                let bytes = config.packet_bytes.ok_or(ConfigError::NoPacketBytes)?;
                if bytes < min_packet_bytes {
                    return Err(ConfigError::PacketTooSmall {
                        what: "packet_bytes",
                        bytes,
                        min: min_packet_bytes,
                    });
                }
            }
            Framing::LengthField => {
                if config.length.is_none() {
                    return Err(ConfigError::NoLengthField);
                }
                if config.max_packet_bytes < min_packet_bytes {
                    return Err(ConfigError::PacketTooSmall {
                        what: "max_packet_bytes",
                        bytes: config.max_packet_bytes,
                        min: min_packet_bytes,
                    });
                }
            }
        }
        let header_crc = config.crc.is_some_and(|crc| {
            let [from, to] = crc.over;
            let header = i64::try_from(header_bytes).unwrap_or(i64::MAX);
            crc.at >= 0 && crc.at.saturating_add(4) <= header && from >= 0 && to > 0 && to <= header
        });
        Ok(PacketFormat {
            config,
            min_packet_bytes,
            header_crc,
            counts: PacketCounts::default(),
        })
    }

    pub fn counts(&self) -> &PacketCounts {
        &self.counts
    }

    /// The packet's length if `bytes` (at least a header) starts with a plausible header.
    fn packet_length(&self, bytes: &[u8]) -> Result<usize, NotAPacket> {
        if let Some(magic) = self.config.magic
            && read_field(bytes, magic.offset, magic.width, magic.order) != magic.value
        {
            return Err(NotAPacket::Magic);
        }
        let length = match (
            self.config.framing,
            self.config.packet_bytes,
            self.config.length,
        ) {
            (Framing::Fixed, Some(bytes), _) => bytes,
            (_, _, Some(field)) => {
                let value = read_field(bytes, field.offset, field.width, field.order);
                let value = usize::try_from(value).map_err(|_| NotAPacket::Length)?;
                let total = if self.config.length_includes_header {
                    Some(value)
                } else {
                    value.checked_add(self.config.header_bytes)
                };
                match total {
                    Some(total)
                        if (self.min_packet_bytes..=self.config.max_packet_bytes)
                            .contains(&total) =>
                    {
                        total
                    }
                    _ => return Err(NotAPacket::Length),
                }
            }
            // `new` refuses fixed framing without packet_bytes and length framing without a
            // length field.
            _ => return Err(NotAPacket::Length),
        };
        Ok(length)
    }

    fn crc_matches(&self, packet: &[u8]) -> bool {
        let Some(crc) = self.config.crc else {
            return true;
        };
        let len = packet.len() as i64;
        let from_end = |position: i64, end_at_zero: bool| {
            if position < 0 || (end_at_zero && position == 0) {
                len + position
            } else {
                position
            }
        };
        let at = from_end(crc.at, false);
        let (from, to) = (from_end(crc.over[0], false), from_end(crc.over[1], true));
        let (Ok(at), Ok(from), Ok(to)) = (
            usize::try_from(at),
            usize::try_from(from),
            usize::try_from(to),
        ) else {
            return false;
        };
        let (Some(stored), Some(covered)) =
            (packet.get(at..at.saturating_add(4)), packet.get(from..to))
        else {
            return false;
        };
        let stored = read_field(stored, 0, 4, crc.order) as u32;
        let computed = match crc.kind {
            CrcKind::Crc32 => CRC32.checksum(covered),
            CrcKind::Crc32c => CRC32C.checksum(covered),
        };
        stored == computed
    }

    fn fragment(&self, header: &[u8], offset: usize, length: usize) -> Fragment {
        let read =
            |field: Option<Field>| field.map(|f| read_field(header, f.offset, f.width, f.order));
        Fragment {
            offset,
            length,
            // A source id field wider than 4 bytes keeps its low 32 bits.
            source_id: read(self.config.source_id).unwrap_or(0) as u32,
            event_number: read(self.config.event_number),
            timestamp: read(self.config.timestamp),
            flags: 0,
        }
    }
}

impl Decoder for PacketFormat {
    fn decode(&mut self, block: &[u8], out: &mut Vec<Fragment>) -> Result<usize, DecodeError> {
        let header_bytes = self.config.header_bytes;
        let mut position = 0;
        let mut garbage: Option<(usize, NotAPacket)> = None;
        let mut first_problem = None;
        let mut end_garbage =
            |this: &mut PacketFormat, garbage: &mut Option<(usize, NotAPacket)>, at: usize| {
                if let Some((start, reason)) = garbage.take() {
                    this.counts.garbage_bytes += (at - start) as u64;
                    first_problem.get_or_insert(PacketError::Garbage {
                        offset: start,
                        bytes: at - start,
                        reason,
                    });
                }
            };
        while block.len() - position >= header_bytes {
            let rest = &block[position..];
            let verdict = match self.packet_length(rest) {
                Ok(_) if self.header_crc && !self.crc_matches(&rest[..header_bytes]) => {
                    Err(NotAPacket::Crc)
                }
                Ok(length) if length > rest.len() => break, // the rest comes with the next block
                Ok(length) if self.header_crc || self.crc_matches(&rest[..length]) => Ok(length),
                Ok(_) => Err(NotAPacket::Crc),
                Err(reason) => Err(reason),
            };
            match verdict {
                Ok(length) => {
                    end_garbage(self, &mut garbage, position);
                    out.push(self.fragment(rest, position, length));
                    self.counts.packets += 1;
                    position += length;
                }
                Err(reason) => {
                    if garbage.is_none() {
                        garbage = Some((position, reason));
                        match reason {
                            NotAPacket::Magic => self.counts.bad_magic += 1,
                            NotAPacket::Length => self.counts.bad_length += 1,
                            NotAPacket::Crc => self.counts.crc_mismatch += 1,
                        }
                    }
                    position += 1;
                }
            }
        }
        end_garbage(self, &mut garbage, position);
        match first_problem {
            None => Ok(position),
            Some(problem) => Err(DecodeError {
                consumed: position,
                problem: problem.into(),
            }),
        }
    }
}

/// `width` bytes at `offset` of `bytes` as an unsigned integer; the caller checked they exist
/// (fields lie within the header, and a header's worth of bytes is there).
fn read_field(bytes: &[u8], offset: usize, width: usize, order: ByteOrder) -> u64 {
    let mut word = [0u8; 8];
    let field = &bytes[offset..offset + width];
    match order {
        ByteOrder::Big => {
            word[8 - width..].copy_from_slice(field);
            u64::from_be_bytes(word)
        }
        ByteOrder::Little => {
            word[..width].copy_from_slice(field);
            u64::from_le_bytes(word)
        }
    }
}

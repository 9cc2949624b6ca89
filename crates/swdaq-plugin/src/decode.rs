//! The one decoder interface every input format implements — a plugin's `decode`
//! ([`PluginDecoder`]) and the configured [`PacketFormat`](crate::PacketFormat) — and
//! [`Stream`], which carries a message split across blocks into the next one.

use crate::abi::{self, RawFragment};
use crate::error::{ErrorCounts, ErrorKind, LoadError, PluginError};
use crate::load::{Instance, Plugin};
use crate::packet::PacketError;

/// Fragment flags the host keeps (the ABI's `SWDAQ_FRAGMENT_*` without the "has" bits, which
/// become `Option`s).
pub mod flags {
    /// The front end or the decoder found the fragment damaged.
    pub const CORRUPT: u32 = 0x4;
    /// Shorter than its header says.
    pub const TRUNCATED: u32 = 0x8;
}

/// One fragment of a decoded block: where it lies and what its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fragment {
    /// Bytes from the start of the block given to `decode`.
    pub offset: usize,
    pub length: usize,
    pub source_id: u32,
    pub event_number: Option<u64>,
    pub timestamp: Option<u64>,
    /// [`flags`] and the detector's own bits 16-31.
    pub flags: u32,
}

impl Fragment {
    /// The fragment's bytes in the block it was decoded from (`None` for another block).
    pub fn bytes<'a>(&self, block: &'a [u8]) -> Option<&'a [u8]> {
        block.get(self.offset..self.offset.checked_add(self.length)?)
    }
}

/// A block that was not decoded cleanly. The fragments appended before (and, where the
/// decoder resynchronised, after) the problem are good and stay in `out`; the caller skips
/// `consumed` bytes as after a clean decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} (block consumed up to byte {consumed})")]
pub struct DecodeError {
    pub consumed: usize,
    pub problem: DecodeProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeProblem {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    Packet(#[from] PacketError),
    #[error("a message grew past {limit} bytes without being decoded: {bytes} bytes dropped")]
    CarryOverflow { bytes: usize, limit: usize },
    /// A decoder of swdaq's own found its layout broken.
    #[error("{0}")]
    Format(String),
}

/// Turns front-end bytes into fragments, a block at a time.
pub trait Decoder {
    /// Decodes `block`, appending its fragments (offsets from the block's start) to `out`,
    /// and returns how many bytes it is done with. The bytes after that are the start of a
    /// message that continues in the next block: a stream's caller gives them again, in front
    /// of the next bytes ([`Stream`] does this). Every fragment lies within the bytes consumed.
    fn decode(&mut self, block: &[u8], out: &mut Vec<Fragment>) -> Result<usize, DecodeError>;
}

/// A decoder chosen at run time (a plugin's or a configured packet format) is one too.
impl<D: Decoder + ?Sized> Decoder for Box<D> {
    fn decode(&mut self, block: &[u8], out: &mut Vec<Fragment>) -> Result<usize, DecodeError> {
        (**self).decode(block, out)
    }
}

/// A plugin's `decode`, every returned value checked before it becomes a [`Fragment`].
pub struct PluginDecoder {
    instance: Instance,
    decode: abi::DecodeFn,
    /// The plugin writes here; its capacity is the `out_capacity` of every call.
    raw: Vec<RawFragment>,
}

impl PluginDecoder {
    /// Fragments one call may return; a block with more takes several calls.
    pub const DEFAULT_BATCH: usize = 1024;

    /// An instance of `plugin`'s decoder configured with `config_toml`.
    pub fn new(plugin: &Plugin, config_toml: &str) -> Result<PluginDecoder, LoadError> {
        let decode = plugin.require(plugin.functions().decode, "decode")?;
        let instance = plugin.instance(config_toml)?;
        Ok(PluginDecoder {
            instance,
            decode,
            raw: vec![RawFragment::default(); Self::DEFAULT_BATCH],
        })
    }

    /// Sets how many fragments one call may return (at least 1).
    pub fn with_batch(mut self, fragments: usize) -> PluginDecoder {
        self.raw = vec![RawFragment::default(); fragments.max(1)];
        self
    }

    pub fn plugin_name(&self) -> &str {
        self.instance.plugin_name()
    }

    /// This instance's failed calls by kind.
    pub fn error_counts(&self) -> &ErrorCounts {
        &self.instance.counts
    }

    /// Checks one call's fragments and appends the good ones, shifted by `start`; returns
    /// the first bad one's error (each is counted).
    fn take_fragments(
        &mut self,
        count: usize,
        consumed: usize,
        start: usize,
        out: &mut Vec<Fragment>,
    ) -> Option<PluginError> {
        let mut first_error = None;
        for index in 0..count {
            let raw = self.raw[index];
            match check_fragment(index, &raw, consumed) {
                Ok(fragment) => out.push(Fragment {
                    offset: fragment.offset + start,
                    ..fragment
                }),
                Err(kind) => {
                    let error = self.instance.fail(kind);
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error
    }
}

/// A fragment the plugin wrote, or why it cannot be used: within the `consumed` bytes, no
/// overflow, no unknown swdaq flag bits.
fn check_fragment(index: usize, raw: &RawFragment, consumed: usize) -> Result<Fragment, ErrorKind> {
    let outside = || ErrorKind::FragmentOutOfBlock {
        index,
        offset: raw.offset,
        length: raw.length,
        consumed,
    };
    let end = raw.offset.checked_add(raw.length).ok_or_else(outside)?;
    if end > consumed as u64 {
        return Err(outside());
    }
    let swdaq_bits = raw.flags & !abi::FRAGMENT_DETECTOR_FLAGS;
    if swdaq_bits & !abi::FRAGMENT_KNOWN_FLAGS != 0 {
        return Err(ErrorKind::UnknownFlags {
            index,
            flags: raw.flags,
        });
    }
    const HAS_EVENT_NUMBER: u32 = 0x1;
    const HAS_TIMESTAMP: u32 = 0x2;
    Ok(Fragment {
        // Both fit: end <= consumed, a usize.
        offset: raw.offset as usize,
        length: raw.length as usize,
        source_id: raw.source_id,
        event_number: (raw.flags & HAS_EVENT_NUMBER != 0).then_some(raw.event_number),
        timestamp: (raw.flags & HAS_TIMESTAMP != 0).then_some(raw.timestamp),
        flags: raw.flags & !(HAS_EVENT_NUMBER | HAS_TIMESTAMP),
    })
}

impl Decoder for PluginDecoder {
    fn decode(&mut self, block: &[u8], out: &mut Vec<Fragment>) -> Result<usize, DecodeError> {
        let mut start = 0;
        let mut first_error: Option<PluginError> = None;
        while start < block.len() {
            let rest = &block[start..];
            let (mut count, mut consumed) = (0usize, 0usize);
            // SAFETY: `rest` is live for the call with its true length; `raw` is ours with its
            // true length as capacity; the two outputs are locals. What the plugin writes is
            // read only after the checks below.
            let status = unsafe {
                (self.decode)(
                    self.instance.pointer,
                    rest.as_ptr(),
                    rest.len(),
                    self.raw.as_mut_ptr(),
                    self.raw.len(),
                    &mut count,
                    &mut consumed,
                )
            };
            // Counts that break the contract make the whole call untrusted: nothing of it is
            // used and the rest of the block is skipped, as no later offset can be believed.
            let broken = if !matches!(status, abi::OK | abi::NEED_ROOM | abi::ERROR) {
                Some(self.instance.status_error(status))
            } else if count > self.raw.len() {
                Some(self.instance.fail(ErrorKind::CountAboveCapacity {
                    count,
                    capacity: self.raw.len(),
                }))
            } else if consumed > rest.len() {
                Some(self.instance.fail(ErrorKind::ConsumedAboveBlock {
                    consumed,
                    len: rest.len(),
                }))
            } else if status == abi::NEED_ROOM && (count == 0 || consumed == 0) {
                Some(self.instance.fail(ErrorKind::NoProgress))
            } else {
                None
            };
            if let Some(error) = broken {
                return Err(DecodeError {
                    consumed: block.len(),
                    problem: first_error.unwrap_or(error).into(),
                });
            }
            // A decoder that fails without saying how far to skip loses the rest of the block
            // (so a stream always moves on); the fragments it wrote are kept within it.
            let consumed = if status == abi::ERROR && consumed == 0 {
                rest.len()
            } else {
                consumed
            };
            if let Some(error) = self.take_fragments(count, consumed, start, out) {
                first_error.get_or_insert(error);
            }
            match status {
                abi::NEED_ROOM => start += consumed,
                abi::OK => {
                    start += consumed;
                    break;
                }
                _ => {
                    let error = self.instance.status_error(status);
                    return Err(DecodeError {
                        consumed: start + consumed,
                        problem: first_error.unwrap_or(error).into(),
                    });
                }
            }
        }
        match first_error {
            None => Ok(start),
            Some(error) => Err(DecodeError {
                consumed: start,
                problem: error.into(),
            }),
        }
    }
}

/// A decoder over a byte stream: the bytes a block left undecoded are kept and decoded with
/// the next block, so a message split across reads (TCP, a file read in pieces) is whole.
pub struct Stream<D> {
    decoder: D,
    carry: Vec<u8>,
    max_carry: usize,
    fragments: Vec<Fragment>,
}

impl<D: Decoder> Stream<D> {
    /// `max_carry`: the most bytes kept waiting for the rest of a message; beyond it they are
    /// dropped and reported (a decoder that never consumes must not grow memory without end).
    pub fn new(decoder: D, max_carry: usize) -> Stream<D> {
        Stream {
            decoder,
            carry: Vec::new(),
            max_carry,
            fragments: Vec::new(),
        }
    }

    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// Bytes waiting for the rest of their message.
    pub fn pending(&self) -> usize {
        self.carry.len()
    }

    /// Decodes `bytes`, the stream's next piece, calling `each` with every whole fragment and
    /// its bytes. A problem is returned after every good fragment of the piece was handed on.
    pub fn push(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(&Fragment, &[u8]),
    ) -> Result<(), DecodeError> {
        self.fragments.clear();
        let block: &[u8] = if self.carry.is_empty() {
            bytes
        } else {
            self.carry.extend_from_slice(bytes);
            &self.carry
        };
        let result = self.decoder.decode(block, &mut self.fragments);
        let consumed = match &result {
            Ok(consumed) => *consumed,
            Err(error) => error.consumed,
        }
        .min(block.len());
        for fragment in &self.fragments {
            if let Some(payload) = fragment.bytes(&block[..consumed]) {
                each(fragment, payload);
            }
        }
        let mut result = result.map(|_| ());
        if self.carry.is_empty() {
            self.carry.extend_from_slice(&bytes[consumed..]);
        } else {
            self.carry.drain(..consumed);
        }
        if self.carry.len() > self.max_carry {
            let bytes = self.carry.len();
            self.carry.clear();
            result = result.and(Err(DecodeError {
                consumed,
                problem: DecodeProblem::CarryOverflow {
                    bytes,
                    limit: self.max_carry,
                },
            }));
        }
        result
    }
}

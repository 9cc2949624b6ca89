//! A detector swdaq has never seen, read through a decoder (#35): a link's datagrams (or any
//! [`FrameSource`]'s blocks) go through a plugin's decoder or a configured packet format, and
//! each fragment it finds becomes one frame of the link's format by a [`Framing`] — a FED
//! fragment around the detector's payload for the event builder, a board frame for the chain.
//!
//! One decoder instance per link (instances are never shared between links); a link's blocks
//! are one stream to it, so a message split across datagrams is whole.

use crate::source::{FrameSource, Poll};
use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use swdaq_plugin::{Decoder, Fragment, Stream};

/// What became of one decoded fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framed {
    /// Its frame was appended.
    Good,
    /// Its frame was appended, marked as the framing's format says, and counted: why.
    Suspect(&'static str),
    /// No frame: why (counted).
    Refused(&'static str),
}

/// Makes one link's frames of its decoded fragments.
pub trait Framing: Send {
    /// Appends the frame of `fragment`, whose bytes are `bytes`, to `out` (or refuses it).
    fn frame(&mut self, fragment: &Fragment, bytes: &[u8], out: &mut Vec<u8>) -> Framed;
}

/// What one link's decoder could not make a good frame of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeCounts {
    /// Blocks the decoder reported a problem in (bytes skipped, a fragment refused, a plugin
    /// error; the block's good fragments were still kept), blocks cut short by the kernel,
    /// a message unfinished at the input's end.
    pub problems: u64,
    /// Fragments kept but marked by the framing (e.g. naming another source).
    pub suspect: u64,
    /// Fragments the framing could not make a frame of (e.g. without the number or time
    /// the link orders by, or too long).
    pub refused: u64,
}

impl DecodeCounts {
    /// Everything the decoder could not take as a good fragment.
    pub fn total(&self) -> u64 {
        self.problems + self.suspect + self.refused
    }
}

/// One link's blocks through a decoder: a [`FrameSource`] whose frames are the framing's.
pub struct DecodedSource<F> {
    /// Who the link is, for the one line naming its first problem ("evb: FED 3").
    label: String,
    input: Box<dyn FrameSource>,
    block: Vec<u8>,
    stream: Stream<Box<dyn Decoder + Send>>,
    framing: F,
    /// Frames waiting for a slot, in arrival order.
    framed: Vec<u8>,
    ready: VecDeque<Range<usize>>,
    counts: DecodeCounts,
    input_ended: bool,
    /// The first problem has been named.
    named: bool,
}

impl<F: Framing> DecodedSource<F> {
    /// `input`'s blocks (of at most `max_block` bytes) through `decoder`, framed by
    /// `framing`; an unfinished message is kept up to `max_message` bytes.
    pub fn new(
        label: String,
        input: Box<dyn FrameSource>,
        max_block: usize,
        decoder: Box<dyn Decoder + Send>,
        max_message: usize,
        framing: F,
    ) -> DecodedSource<F> {
        DecodedSource {
            label,
            input,
            block: vec![0; max_block],
            stream: Stream::new(decoder, max_message),
            framing,
            framed: Vec::new(),
            ready: VecDeque::new(),
            counts: DecodeCounts::default(),
            input_ended: false,
            named: false,
        }
    }

    pub fn counts(&self) -> DecodeCounts {
        self.counts
    }

    /// Decodes one block, framing each fragment.
    fn decode(&mut self, len: usize) {
        if len > self.block.len() {
            // The kernel cut the datagram short: what arrived is not the message sent.
            self.counts.problems += 1;
            self.name_first(&format!(
                "a {len}-byte datagram, longer than the {} bytes a block may have",
                self.block.len()
            ));
            return;
        }
        let Self {
            block,
            stream,
            framing,
            framed,
            ready,
            counts,
            ..
        } = self;
        let mut first_refusal = None;
        let result = stream.push(&block[..len], |fragment, bytes| {
            let start = framed.len();
            match framing.frame(fragment, bytes, framed) {
                Framed::Good => {}
                Framed::Suspect(why) => {
                    counts.suspect += 1;
                    first_refusal.get_or_insert(why);
                }
                Framed::Refused(why) => {
                    counts.refused += 1;
                    first_refusal.get_or_insert(why);
                    framed.truncate(start);
                    return;
                }
            }
            ready.push_back(start..framed.len());
        });
        if let Err(error) = &result {
            counts.problems += 1;
            self.name_first(&error.to_string());
        } else if let Some(why) = first_refusal {
            self.name_first(why);
        }
    }

    /// Says once, on stderr, what the link's decoder first failed at: the run goes on, and
    /// every failure is counted.
    fn name_first(&mut self, problem: &str) {
        if !self.named {
            self.named = true;
            eprintln!(
                "{}: decoder: {problem} (every such problem is counted in the link's decode errors)",
                self.label
            );
        }
    }
}

impl<F: Framing> FrameSource for DecodedSource<F> {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        loop {
            if let Some(range) = self.ready.pop_front() {
                let len = range.len();
                // A frame larger than the slot is left out and reported by its length: the
                // link counts it oversized.
                if let Some(to) = slot.get_mut(..len) {
                    to.copy_from_slice(&self.framed[range]);
                }
                if self.ready.is_empty() {
                    self.framed.clear();
                }
                return Ok(Poll::Frame(len));
            }
            if self.input_ended {
                return Ok(Poll::End);
            }
            match self.input.next_frame(&mut self.block)? {
                Poll::Frame(len) => self.decode(len),
                Poll::Idle => return Ok(Poll::Idle),
                Poll::End => {
                    self.input_ended = true;
                    // An unfinished message at the end of the input never completes.
                    self.counts.problems += u64::from(self.stream.pending() > 0);
                }
            }
        }
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.input.kernel_drops()
    }

    fn decode_errors(&self) -> u64 {
        self.counts.total()
    }
}

/// Blocks held in memory, handed out one per call, then the end: captured datagrams, and
/// tests' stand-in for a socket.
pub struct Blocks(pub VecDeque<Vec<u8>>);

impl FrameSource for Blocks {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        Ok(match self.0.pop_front() {
            Some(d) => {
                // As a socket does: what fits, and the block's whole length.
                let fits = d.len().min(slot.len());
                slot[..fits].copy_from_slice(&d[..fits]);
                Poll::Frame(d.len())
            }
            None => Poll::End,
        })
    }
}

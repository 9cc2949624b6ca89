//! Where a link's frames come from. The readout sees only [`FrameSource`]: it hands the
//! source the next latency-buffer slot and the source writes one frame straight into it, or,
//! for a source that receives several frames per call (UDP with `recvmmsg`), a run of
//! consecutive slots that it fills in order.

use crate::ring::SlotRun;
use std::io;

/// What a source did when asked for a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// A frame of this many bytes is in the slot (possibly the wrong size: the checks judge).
    Frame(usize),
    /// Nothing now; ask again.
    Idle,
    /// The source is finished (end of file, emulator run length reached).
    End,
}

/// What a source did when asked for a batch of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// This many frames (at least one) are in the first slots, their lengths in `lens`.
    Frames(usize),
    Idle,
    End,
}

impl From<Poll> for Batch {
    fn from(poll: Poll) -> Self {
        match poll {
            Poll::Frame(_) => Batch::Frames(1),
            Poll::Idle => Batch::Idle,
            Poll::End => Batch::End,
        }
    }
}

pub trait FrameSource: Send {
    /// Writes the next frame into `slot` (which is at least the format's frame size).
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll>;

    /// Most frames [`Self::next_frames`] fills per call; fixed for the source's life.
    fn batch_size(&self) -> usize {
        1
    }

    /// Writes the next frames into slots `0..k` of `run` (`k <= run.len()`, at most
    /// [`Self::batch_size`]) and their lengths into `lens[..k]`, each possibly larger than a
    /// slot when the frame did not fit (an oversized datagram: the checks count it).
    fn next_frames(&mut self, run: &mut SlotRun<'_>, lens: &mut [usize]) -> io::Result<Batch> {
        let poll = self.next_frame(run.slot_mut(0))?;
        if let Poll::Frame(len) = poll {
            lens[0] = len;
        }
        Ok(poll.into())
    }

    /// Frames the kernel dropped before the source could receive them (a UDP socket's
    /// receive buffer was full), counted since the source opened; `None` where it cannot
    /// tell. A system call: ask when idle, not per frame.
    fn kernel_drops(&self) -> Option<u64> {
        None
    }

    /// What the source's decoder could not make a frame of (bytes skipped, fragments
    /// refused), counted since the source opened; 0 for a source without a decoder.
    fn decode_errors(&self) -> u64 {
        0
    }

    /// What a framed stream (FEROL blocks over TCP) counted for this source's link since it
    /// opened: its framing's corruptions and the stream's connections, closes and stalls;
    /// `None` for a source that is no such stream.
    fn stream_counts(&self) -> Option<StreamCounts> {
        None
    }
}

/// One link's share of a framed TCP stream (several links may share one stream: its
/// connections, closes and stalls count for each of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamCounts {
    /// Block headers without the framing's signature.
    pub signature: u64,
    /// Blocks naming another source than their fragment's or the stream's.
    pub fed_id: u64,
    /// Blocks whose event number is not their fragment's.
    pub event_number: u64,
    /// Blocks out of order (or a fragment left without its last block).
    pub packet_order: u64,
    /// Impossible block lengths, or fragments longer than the link takes.
    pub length: u64,
    /// Connections the stream accepted.
    pub connections: u64,
    /// Times the sender closed the connection.
    pub closed: u64,
    /// Closes that cut a fragment short (it is lost).
    pub cut: u64,
    /// Times the stream stopped mid-fragment for longer than the link's stall time.
    pub stalled: u64,
}

impl StreamCounts {
    /// Fragments the framing lost to corruption.
    pub fn corrupt(&self) -> u64 {
        self.signature + self.fed_id + self.event_number + self.packet_order + self.length
    }
}

/// Replays a raw file written by `swdaq gen` or by recording.
pub struct FileSource<R: io::Read + Send> {
    reader: swdaq_format::rawfile::RawFileReader<R>,
}

impl<R: io::Read + Send> FileSource<R> {
    pub fn new(input: R) -> Result<Self, swdaq_format::rawfile::RawFileError> {
        Ok(Self {
            reader: swdaq_format::rawfile::RawFileReader::new(input)?,
        })
    }

    pub fn header(&self) -> &swdaq_format::rawfile::RawFileHeader {
        self.reader.header()
    }
}

impl<R: io::Read + Send> FrameSource for FileSource<R> {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        match self.reader.read_frame_into(slot) {
            Ok(Some(len)) => Ok(Poll::Frame(len)),
            Ok(None) => Ok(Poll::End),
            Err(swdaq_format::rawfile::RawFileError::Io(e)) => Err(e),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

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

//! Where a link's frames come from. The readout sees only [`FrameSource`]: it hands the
//! source the next latency-buffer slot and the source writes one frame straight into it.

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

pub trait FrameSource: Send {
    /// Writes the next frame into `slot` (which is at least the format's frame size).
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll>;
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

//! Recording a link's raw stream (the supernova-buffer use case): a reader of the latency
//! buffer that follows the producer and writes every frame to a raw file through an 8 MiB
//! buffer, so the disk sees few large writes. The file replays with `FileSource`.

use crate::link::LinkShared;
use crate::ring::Reader;
use std::io::{self, BufWriter, Write};
use swdaq_format::rawfile::{RawFileHeader, RawFileWriter};

const WRITE_BUFFER: usize = 8 << 20;

pub struct Recorder<'a, W: Write> {
    link: &'a LinkShared,
    reader: Reader<'a>,
    writer: RawFileWriter<BufWriter<W>>,
    next: u64,
    /// Frames that left the buffer before the recorder got to them.
    pub frames_lost: u64,
}

impl<'a, W: Write> Recorder<'a, W> {
    /// Starts recording with the next frame the link publishes. `None` if all readers of the
    /// buffer are in use.
    pub fn start(link: &'a LinkShared, out: W, header: &RawFileHeader) -> io::Result<Option<Self>> {
        let Some(reader) = link.buffer.reader() else {
            return Ok(None);
        };
        let writer = RawFileWriter::new(BufWriter::with_capacity(WRITE_BUFFER, out), header)?;
        Ok(Some(Self {
            next: link.buffer.published(),
            link,
            reader,
            writer,
            frames_lost: 0,
        }))
    }

    /// Starts from the oldest frame still readable instead (record what is already buffered).
    pub fn from_oldest(mut self) -> Self {
        self.next = self.link.buffer.oldest_readable();
        self
    }

    /// Writes every frame published since the last call; returns how many.
    pub fn step(&mut self) -> io::Result<u64> {
        loop {
            let from = self.next;
            let written = self.reader.with_view(from, |view| -> io::Result<u64> {
                for i in view.first..view.end {
                    self.writer.write_frame(view.frame(i))?;
                }
                Ok(view.end - view.first)
            });
            match written {
                Ok(n) => {
                    self.next = from + n?;
                    return Ok(self.next - from);
                }
                Err(oldest) => {
                    // Fell behind by a whole buffer: count the loss and carry on from what is left.
                    self.frames_lost += oldest - from;
                    self.next = oldest;
                }
            }
        }
    }

    pub fn frames_written(&self) -> u64 {
        self.writer.frames_written()
    }

    /// Writes what is left and flushes the file.
    pub fn finish(mut self) -> io::Result<W> {
        self.step()?;
        self.writer
            .finish()?
            .into_inner()
            .map_err(|e| e.into_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Ingest;
    use crate::source::{Batch, FileSource, FrameSource, Poll};
    use swdaq_format::FrameFormat;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::wibeth::{self, WibEthHeader};
    use swdaq_format::{FragmentType, SourceId};

    struct Generated(u64, u64);
    impl FrameSource for Generated {
        fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
            if self.0 == self.1 {
                return Ok(Poll::End);
            }
            let daq = DaqEthHeader {
                timestamp: self.0 * 2048,
                seq_id: self.0 as u16 & 0xfff,
                ..Default::default()
            };
            let adcs = std::array::from_fn(|s| {
                std::array::from_fn(|c| ((self.0 as usize * 7 + s + c) % 16384) as u16)
            });
            wibeth::encode(
                &daq,
                &WibEthHeader::healthy(),
                &adcs,
                &mut slot[..wibeth::FRAME_SIZE],
            );
            self.0 += 1;
            Ok(Poll::Frame(wibeth::FRAME_SIZE))
        }
    }

    fn header() -> RawFileHeader {
        RawFileHeader {
            frame_type: FragmentType::WIBETH,
            frame_size: wibeth::FRAME_SIZE as u32,
            source_id: SourceId::readout(4),
            run_number: 3,
            first_timestamp: 0,
            created_unix_ns: 0,
        }
    }

    #[test]
    fn recording_then_replaying_gives_back_the_same_frames() {
        let link = LinkShared::new(SourceId::readout(4), FrameFormat::WibEth, 0.05).unwrap();
        let mut recorder = Recorder::start(&link, Vec::new(), &header())
            .unwrap()
            .unwrap();
        let mut ingest = Ingest::new(&link, Generated(0, 500), ()).unwrap();
        // Record while ingesting, a few frames behind.
        while ingest.step().unwrap() != Batch::End {
            if ingest.counts.frames.is_multiple_of(37) {
                recorder.step().unwrap();
            }
        }
        let file = recorder.finish().unwrap();
        let mut replay = FileSource::new(&file[..]).unwrap();
        let mut expected = Generated(0, 500);
        let (mut a, mut b) = (vec![0u8; wibeth::FRAME_SIZE], vec![0u8; wibeth::FRAME_SIZE]);
        let mut n = 0;
        while let Poll::Frame(len) = replay.next_frame(&mut a).unwrap() {
            expected.next_frame(&mut b).unwrap();
            assert_eq!(&a[..len], &b[..], "frame {n}");
            n += 1;
        }
        assert_eq!(n, 500);
    }

    #[test]
    fn a_recorder_that_falls_behind_counts_what_it_lost() {
        let link = LinkShared::new(SourceId::readout(4), FrameFormat::WibEth, 0.01).unwrap();
        let mut recorder = Recorder::start(&link, Vec::new(), &header())
            .unwrap()
            .unwrap();
        let capacity = link.buffer.capacity() as u64;
        Ingest::new(&link, Generated(0, capacity * 3), ())
            .unwrap()
            .run(|| true)
            .unwrap();
        recorder.step().unwrap();
        assert_eq!(
            recorder.frames_lost + recorder.frames_written(),
            capacity * 3
        );
        assert!(recorder.frames_lost > capacity * 2);
    }
}

//! Recording a link's raw stream, supernova-burst style: a reader of the latency buffer that
//! writes what the buffer holds (from its oldest frame) and what the link publishes next, up
//! to a data time, to a swdaq raw file that `FileSource` and `swdaq run`'s file source replay.
//!
//! The recorder never holds the producer up. It pins the ring only while it copies one small
//! chunk of frames (at most [`STAGE_BYTES`], and at most 1/32 of the ring) into its own
//! staging buffer; the file is written after the pin is released, so a slow disk (page-cache
//! throttling can put a writer to sleep) only makes the recorder fall behind. A pin costs
//! the producer a frame only if the producer writes past the pinned frame while one chunk is
//! copied: the ring keeps `capacity / 16` frames between the overwrite point and the oldest
//! frame a reader may pin. The recorder starts (and, if it fell behind, resumes) [`EDGE_SLACK`]
//! of the ring past the oldest readable frame: copying far faster than a link produces, it
//! then moves away from the edge, where starting right at it would lose the race to the
//! first frame the producer publishes. Frames the recorder lost are counted and each gap is named (where it is,
//! how many frames) in its counts; the file holds the frames on either side, so a replay's
//! continuity checks see the gap too.

use crate::link::LinkShared;
use crate::ring::Reader;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use swdaq_format::file_checksum::{self, ChecksumWriter};
use swdaq_format::rawfile::{RawFileHeader, write_record};
use swdaq_format::run_files;
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

/// Bytes copied from the ring under one pin, and written to the file at once.
pub const STAGE_BYTES: usize = 1 << 20;
/// Share of the ring between the oldest readable frame and where a burst starts, or a
/// recorder that fell behind resumes: the time (1 s buffer: 31 ms) it has to copy its first
/// chunk before that frame is overwritten.
pub const EDGE_SLACK: f64 = 1.0 / 32.0;
/// Gaps named one by one in the counts; later ones are only counted.
pub const MAX_GAPS_NAMED: usize = 16;

/// Frames that left the buffer before the recorder got to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gap {
    /// Timestamp of the last frame written before the gap (`None`: before the first).
    pub after_timestamp: Option<u64>,
    pub frames: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecorderCounts {
    pub frames_written: u64,
    /// Bytes of the file (header and record headers included).
    pub bytes_written: u64,
    pub frames_lost: u64,
    /// The first [`MAX_GAPS_NAMED`] gaps; `gaps_unnamed` counts the others.
    pub gaps: Vec<Gap>,
    pub gaps_unnamed: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    /// Largest backlog (frames published, not yet copied) the recorder found when it woke,
    /// once it had first caught up with the producer (before that it is reading the buffer).
    pub max_lag_frames: u64,
}

impl RecorderCounts {
    /// Counts `frames` lost after the last frame written (one gap however many losses).
    fn lose(&mut self, frames: u64) {
        self.frames_lost += frames;
        if let Some(gap) = self
            .gaps
            .last_mut()
            .filter(|g| g.after_timestamp == self.last_timestamp)
        {
            gap.frames += frames;
        } else if self.gaps.len() < MAX_GAPS_NAMED {
            self.gaps.push(Gap {
                after_timestamp: self.last_timestamp,
                frames,
            });
        } else {
            self.gaps_unnamed += 1;
        }
    }
}

/// Where a recording begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The oldest frame still in the buffer (less [`EDGE_SLACK`]): the whole latency buffer
    /// is recorded.
    Oldest,
    /// The next frame the link publishes.
    Next,
}

pub struct Recorder<'a, W: Write> {
    link: &'a LinkShared,
    reader: Reader<'a>,
    out: W,
    /// Written in front of the first frame, with that frame's timestamp.
    header: Option<RawFileHeader>,
    stage: Vec<u8>,
    next: u64,
    /// Data time at which the recording ends (exclusive), once known.
    until: Option<u64>,
    /// Ticks recorded after the request, when the end was not known at the start: counted
    /// from the frame published first after the request, `anchor`.
    ticks_after: Option<u64>,
    anchor: u64,
    caught_up: bool,
    done: bool,
    pub counts: RecorderCounts,
}

impl<'a, W: Write> Recorder<'a, W> {
    /// A recorder writing to `out` from `start`, with no end (see [`Self::for_ticks`]).
    /// `None` if all readers of the buffer are in use.
    pub fn start(
        link: &'a LinkShared,
        out: W,
        header: &RawFileHeader,
        start: Start,
    ) -> Option<Self> {
        let reader = link.buffer.reader()?;
        let next = match start {
            Start::Oldest => edge_plus_slack(link),
            Start::Next => link.buffer.published(),
        };
        Some(Self {
            link,
            reader,
            out,
            header: Some(*header),
            stage: Vec::with_capacity(STAGE_BYTES + link.buffer.max_frame() + 64),
            next,
            until: None,
            ticks_after: None,
            anchor: next,
            caught_up: false,
            done: false,
            counts: RecorderCounts::default(),
        })
    }

    /// Ends the recording with the last frame at most `ticks` of data time after the newest
    /// frame published now (or after the first frame recorded, if the link has published
    /// none yet).
    pub fn for_ticks(mut self, ticks: u64) -> Self {
        let newest = self
            .link
            .buffer
            .published()
            .checked_sub(1)
            .and_then(|i| self.reader.with_view(i, |view| view.meta(i).timestamp).ok());
        match newest {
            Some(ts) => self.until = Some(ts.saturating_add(ticks).saturating_add(1)),
            None => {
                self.ticks_after = Some(ticks);
                self.anchor = self.link.buffer.published();
            }
        }
        self
    }

    /// Every frame up to the end has been written.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The recorder has copied everything published at least once (it has read the buffer).
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// Frames published and not yet copied.
    pub fn backlog(&self) -> u64 {
        self.link.buffer.published().saturating_sub(self.next)
    }

    /// Copies and writes every frame published since the last call (up to the end); returns
    /// how many.
    pub fn step(&mut self) -> io::Result<u64> {
        let mut total = 0;
        while !self.done {
            let from = self.next;
            let (stage, ticks_after, anchor) = (&mut self.stage, self.ticks_after, self.anchor);
            let tpf = self.link.format.ticks_per_frame();
            let mut until = self.until;
            let chunk_frames = (self.link.buffer.capacity() as u64 / 32).max(1);
            let copied = self.reader.with_view(from, |view| {
                let mut chunk = Chunk::default();
                let mut i = view.first;
                while i < view.end && stage.len() < STAGE_BYTES && i - view.first < chunk_frames {
                    let timestamp = view.meta(i).timestamp;
                    // Ending `ticks_after` past the anchor frame: known from the first frame
                    // copied, which is the anchor unless the anchor was lost (then its time
                    // is this frame's less a frame period per frame lost).
                    if until.is_none()
                        && let Some(ticks) = ticks_after
                    {
                        let anchor_time =
                            timestamp.saturating_sub(i.saturating_sub(anchor).saturating_mul(tpf));
                        until = Some(anchor_time.saturating_add(ticks).saturating_add(1));
                    }
                    if until.is_some_and(|u| timestamp >= u) {
                        chunk.reached_end = true;
                        break;
                    }
                    // Writing into a Vec cannot fail.
                    let _ = write_record(stage, view.frame(i));
                    chunk.first_timestamp.get_or_insert(timestamp);
                    chunk.last_timestamp = Some(timestamp);
                    i += 1;
                }
                chunk.frames = i - view.first;
                chunk.backlog = view.end - view.first;
                chunk
            });
            let chunk = match copied {
                Ok(chunk) => chunk,
                Err(_) => {
                    let resume = edge_plus_slack(self.link);
                    let lost = resume - from;
                    // Frames past the end are no loss: after the last frame written, the
                    // window had room for `in_window` more (timestamps a frame apart).
                    let tpf = self.link.format.ticks_per_frame();
                    let in_window = match (self.until, self.counts.last_timestamp, self.ticks_after)
                    {
                        (Some(until), Some(last), _) => {
                            until.saturating_sub(last + tpf).div_ceil(tpf)
                        }
                        // The end not yet known: the window is `ticks` from the anchor.
                        (None, _, Some(ticks)) => {
                            (self.anchor + ticks / tpf + 1).saturating_sub(from)
                        }
                        _ => u64::MAX,
                    };
                    if in_window < lost {
                        if in_window > 0 {
                            self.counts.lose(in_window);
                        }
                        self.done = true;
                        continue;
                    }
                    self.counts.lose(lost);
                    self.next = resume;
                    self.caught_up = false;
                    continue;
                }
            };
            self.until = until;
            if total == 0 && self.caught_up {
                self.counts.max_lag_frames = self.counts.max_lag_frames.max(chunk.backlog);
            }
            self.write_chunk(&chunk)?;
            total += chunk.frames;
            if chunk.reached_end {
                self.done = true;
            } else if chunk.frames == chunk.backlog {
                self.caught_up = true;
                break;
            }
        }
        Ok(total)
    }

    fn write_chunk(&mut self, chunk: &Chunk) -> io::Result<()> {
        if let Some(first) = chunk.first_timestamp {
            self.write_header(first)?;
        }
        self.out.write_all(&self.stage)?;
        self.counts.bytes_written += self.stage.len() as u64;
        self.stage.clear();
        self.next += chunk.frames;
        self.counts.frames_written += chunk.frames;
        if let Some(first) = chunk.first_timestamp {
            self.counts.first_timestamp.get_or_insert(first);
            self.counts.last_timestamp = chunk.last_timestamp;
        }
        Ok(())
    }

    /// The file header, once, with the first frame's timestamp.
    fn write_header(&mut self, first_timestamp: u64) -> io::Result<()> {
        if let Some(mut header) = self.header.take() {
            header.first_timestamp = first_timestamp;
            let bytes = header.to_bytes();
            self.out.write_all(&bytes)?;
            self.counts.bytes_written += bytes.len() as u64;
        }
        Ok(())
    }

    /// Writes what is left (up to the end) and flushes; a file with no frame still gets its
    /// header.
    pub fn finish(mut self) -> io::Result<(W, RecorderCounts)> {
        self.step()?;
        self.write_header(0)?;
        self.out.flush()?;
        Ok((self.out, self.counts))
    }
}

/// The oldest frame that stays readable while the producer writes [`EDGE_SLACK`] of the ring
/// more (at most the next frame): the oldest frame itself while the ring has room.
fn edge_plus_slack(link: &LinkShared) -> u64 {
    let slack = (link.buffer.capacity() as f64 * EDGE_SLACK) as u64;
    link.buffer
        .oldest_readable_after(slack)
        .min(link.buffer.published())
}

/// What one pinned copy took from the ring.
#[derive(Default)]
struct Chunk {
    frames: u64,
    /// Frames published and not yet copied when the chunk began.
    backlog: u64,
    first_timestamp: Option<u64>,
    last_timestamp: Option<u64>,
    reached_end: bool,
}

/// One link's part of a burst, as it ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkBurst {
    pub path: PathBuf,
    pub counts: RecorderCounts,
    /// The recording stopped before its end time (the run stopped, or the link ended).
    pub cut_short: bool,
    /// Wall-clock seconds from the request to the file's rename.
    pub seconds: f64,
    /// Wall-clock seconds until the recorder first caught up with the producer, and the
    /// bytes written by then: how fast it wrote out the buffer (`None`: it never did).
    pub catch_up_seconds: Option<f64>,
    pub catch_up_bytes: u64,
    /// CPU seconds the recording thread used (copies, file writes, waiting polls).
    pub cpu_seconds: f64,
}

/// Records `link`'s whole latency buffer and the next `ticks_after` of data time into the raw
/// file `path`, written as `<path>.writing` and renamed when complete; stops early (the file
/// still closed and renamed) once `stop` is set. Checks for new frames every `poll`.
pub fn record_burst(
    link: &LinkShared,
    path: &Path,
    header: &RawFileHeader,
    ticks_after: u64,
    stop: &AtomicBool,
    poll: Duration,
    mut metrics: Option<RecorderMetrics>,
) -> io::Result<LinkBurst> {
    let frame_rate = link.format.frame_rate_hz();
    let started = Instant::now();
    let cpu = cpu_time::ThreadTime::now();
    let writing = writing_path(path);
    let file = ChecksumWriter::new(run_files::create_new(&writing)?);
    let mut recorder = Recorder::start(link, file, header, Start::Oldest)
        .ok_or_else(|| io::Error::other("every reader of the link's latency buffer is in use"))?
        .for_ticks(ticks_after);
    let mut cut_short = false;
    let mut catch_up = None;
    loop {
        let lag_s = recorder.backlog() as f64 / frame_rate;
        recorder.step()?;
        if catch_up.is_none() && recorder.caught_up() {
            catch_up = Some((
                started.elapsed().as_secs_f64(),
                recorder.counts.bytes_written,
            ));
        }
        if let Some(m) = metrics.as_mut() {
            m.publish(&recorder.counts, lag_s);
        }
        if recorder.is_done() {
            break;
        }
        if stop.load(Ordering::Acquire) {
            recorder.step()?;
            cut_short = !recorder.is_done();
            break;
        }
        std::thread::sleep(poll);
    }
    let (file, counts) = recorder.finish()?;
    if let Some(m) = metrics.as_mut() {
        m.publish(&counts, 0.0);
    }
    run_files::rename_no_replace(&writing, path)?;
    file_checksum::note_closed(header.run_number, path, Some(file.checksums()));
    Ok(LinkBurst {
        path: path.to_owned(),
        counts,
        cut_short,
        seconds: started.elapsed().as_secs_f64(),
        catch_up_seconds: catch_up.map(|c| c.0),
        catch_up_bytes: catch_up.map_or(0, |c| c.1),
        cpu_seconds: cpu.elapsed().as_secs_f64(),
    })
}

/// Where a file is written before it is complete.
pub fn writing_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".writing");
    PathBuf::from(name)
}

/// A burst recorder's counters (one block per recording thread; blocks of later bursts of
/// the same link add to the same series).
pub struct RecorderMetrics {
    /// Frames written, bytes written, frames lost.
    counters: [Counter; 3],
    lag: Gauge,
    published: [u64; 3],
}

impl RecorderMetrics {
    pub fn register(registry: &Registry, thread: &str, link: u32) -> Result<Self, MonitorError> {
        let link = link.to_string();
        let mut block = registry.block(thread, &[("link", &link)]);
        let mut c = |name: &str, help: &str| block.counter(name, help);
        let counters = [
            c(
                "swdaq_recording_frames_total",
                "Frames written to raw burst files",
            )?,
            c(
                "swdaq_recording_bytes_total",
                "Bytes written to raw burst files",
            )?,
            c(
                "swdaq_recording_frames_lost_total",
                "Frames that left the latency buffer before the recorder copied them",
            )?,
        ];
        let lag = block.gauge(
            "swdaq_recording_lag_seconds",
            "Data time published but not yet copied by the recorder, when it last woke",
        )?;
        Ok(Self {
            counters,
            lag,
            published: [0; 3],
        })
    }

    /// Adds what was counted since the last call; `lag_s` is the backlog in data time.
    pub fn publish(&mut self, counts: &RecorderCounts, lag_s: f64) {
        let now = [
            counts.frames_written,
            counts.bytes_written,
            counts.frames_lost,
        ];
        for ((counter, last), value) in self.counters.iter().zip(&mut self.published).zip(now) {
            counter.add(value - *last);
            *last = value;
        }
        self.lag.set(lag_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Ingest;
    use crate::source::{Batch, FileSource, FrameSource, Poll};
    use proptest::prelude::*;
    use swdaq_format::FrameFormat;
    use swdaq_format::daq_eth::DaqEthHeader;
    use swdaq_format::rawfile::RawFileReader;
    use swdaq_format::wibeth::{self, WibEthHeader};
    use swdaq_format::{FragmentType, SourceId};

    const TICKS: u64 = 2048;

    /// WIBEth frames `from..to`, frame `i` at timestamp `i * TICKS`.
    struct Generated(u64, u64);
    impl FrameSource for Generated {
        fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
            if self.0 == self.1 {
                return Ok(Poll::End);
            }
            let daq = DaqEthHeader {
                timestamp: self.0 * TICKS,
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

    /// A link whose buffer holds `frames` WIBEth frames (a power of two).
    fn link(frames: usize) -> LinkShared {
        let seconds = frames as f64 / FrameFormat::WibEth.frame_rate_hz();
        let link = LinkShared::new(SourceId::readout(4), FrameFormat::WibEth, seconds).unwrap();
        assert_eq!(link.buffer.capacity(), frames);
        link
    }

    /// The frame numbers in a raw file, and its header.
    fn frames_in(file: &[u8]) -> (RawFileHeader, Vec<u64>) {
        let mut reader = RawFileReader::new(file).unwrap();
        let header = *reader.header();
        let (mut frame, mut expected, mut numbers) = (Vec::new(), vec![0u8; 7200], Vec::new());
        while reader.next_frame(&mut frame).unwrap() {
            let ts = FrameFormat::WibEth.header(&frame).unwrap().timestamp;
            Generated(ts / TICKS, u64::MAX)
                .next_frame(&mut expected)
                .unwrap();
            assert_eq!(frame, expected, "frame at {ts} holds other bytes");
            numbers.push(ts / TICKS);
        }
        (header, numbers)
    }

    #[test]
    fn recording_then_replaying_gives_back_the_same_frames() {
        let link = link(256);
        let mut recorder = Recorder::start(&link, Vec::new(), &header(), Start::Next).unwrap();
        let mut ingest = Ingest::new(&link, Generated(0, 500), ()).unwrap();
        // Record while ingesting, a few frames behind.
        while ingest.step().unwrap() != Batch::End {
            if ingest.counts.frames.is_multiple_of(37) {
                recorder.step().unwrap();
            }
        }
        let (file, counts) = recorder.finish().unwrap();
        assert_eq!(counts.bytes_written, file.len() as u64);
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
    fn a_burst_holds_the_whole_buffer_and_the_data_time_after_the_request() {
        let link = link(64);
        let mut ingest = Ingest::new(&link, Generated(0, 1000), ()).unwrap();
        for _ in 0..300 {
            ingest.step().unwrap();
        }
        // 300 published, capacity 64, guard 4: frames 240..300 are readable; the burst starts
        // the slack (2) further on.
        let mut recorder = Recorder::start(&link, Vec::new(), &header(), Start::Oldest)
            .unwrap()
            .for_ticks(20 * TICKS);
        loop {
            recorder.step().unwrap();
            if recorder.is_done() {
                break;
            }
            ingest.step().unwrap();
        }
        let (file, counts) = recorder.finish().unwrap();
        let (header, numbers) = frames_in(&file);
        // Through the newest frame at the request (299) plus 20 frames' time: up to 319.
        assert_eq!(numbers, (242..=319).collect::<Vec<_>>());
        assert_eq!(header.first_timestamp, 242 * TICKS);
        assert_eq!(header.source_id, SourceId::readout(4));
        assert_eq!((counts.frames_lost, counts.frames_written), (0, 78));
        assert_eq!(ingest.counts.dropped, 0);
    }

    #[test]
    fn a_burst_asked_before_any_frame_ends_from_the_first_frame_published_even_when_lost() {
        for (published_before_step, span) in [(5u64, 20u64), (200, 20), (200, 190)] {
            let link = link(64);
            let mut ingest = Ingest::new(&link, Generated(0, 1000), ()).unwrap();
            let recorder = Recorder::start(&link, Vec::new(), &header(), Start::Oldest)
                .unwrap()
                .for_ticks(span * TICKS);
            // The recorder sleeps until the ring has wrapped past frame 0, the anchor.
            for _ in 0..published_before_step {
                ingest.step().unwrap();
            }
            let mut recorder = recorder;
            while !recorder.is_done() {
                recorder.step().unwrap();
                ingest.step().unwrap();
            }
            let (file, counts) = recorder.finish().unwrap();
            let (_, numbers) = frames_in(&file);
            // The window is frames 0..=span, whatever was lost of it.
            assert!(numbers.iter().all(|&n| n <= span), "{numbers:?}");
            assert_eq!(counts.frames_written + counts.frames_lost, span + 1);
            if published_before_step < 60 {
                assert_eq!(numbers, (0..=span).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_recorder_that_falls_behind_names_its_gaps_and_never_costs_the_producer_a_frame() {
        let link = link(64);
        let mut recorder = Recorder::start(&link, Vec::new(), &header(), Start::Next).unwrap();
        let mut ingest = Ingest::new(&link, Generated(0, 64 * 5), ()).unwrap();
        ingest.run(|| true).unwrap();
        recorder.step().unwrap();
        let (file, counts) = recorder.finish().unwrap();
        let (_, numbers) = frames_in(&file);
        assert_eq!(ingest.counts.dropped, 0);
        assert_eq!(counts.frames_lost + counts.frames_written, 64 * 5);
        // Lost up to the oldest readable (320 + 4 - 64 = 260) plus the slack (2).
        assert_eq!(
            counts.gaps,
            [Gap {
                after_timestamp: None,
                frames: 260 + 2
            }]
        );
        assert_eq!(numbers, (262..320).collect::<Vec<_>>());
    }

    #[test]
    fn a_burst_file_is_renamed_once_complete_and_cut_short_by_a_stop() {
        let dir = std::env::temp_dir().join(format!("swdaq-burst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("link4.swraw");
        let link = link(64);
        Ingest::new(&link, Generated(0, 100), ())
            .unwrap()
            .run(|| true)
            .unwrap();
        // No more data comes: the stop ends the burst before its end time.
        let stop = AtomicBool::new(true);
        let burst = record_burst(
            &link,
            &path,
            &header(),
            1 << 30,
            &stop,
            Duration::ZERO,
            None,
        )
        .unwrap();
        assert!(burst.cut_short);
        assert!(!writing_path(&path).exists());
        let (header, numbers) = frames_in(&std::fs::read(&path).unwrap());
        assert_eq!(numbers, (42..100).collect::<Vec<_>>());
        assert_eq!(header.first_timestamp, 42 * TICKS);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A writer that sleeps on every write, like a disk that cannot keep up.
    struct SlowDisk(Vec<u8>, Duration);
    impl Write for SlowDisk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            std::thread::sleep(self.1);
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_too_slow_recorder_on_its_own_thread_loses_frames_the_producer_does_not() {
        let link = link(4096);
        let total = 40_000;
        let done = AtomicBool::new(false);
        // Started before the producer: every frame it publishes is the recorder's to write
        // or to count lost.
        let (dropped, counts, file) = std::thread::scope(|s| {
            let mut recorder = Recorder::start(
                &link,
                SlowDisk(Vec::new(), Duration::from_millis(10)),
                &header(),
                Start::Next,
            )
            .unwrap();
            let producer = s.spawn(|| {
                let mut ingest = Ingest::new(&link, Generated(0, total), ()).unwrap();
                // About 0.23 GB/s, still more than the slow disk takes: the guard of 256
                // frames is 8 ms, so a recorder thread descheduled while it copies one chunk
                // on a loaded machine does not cost the producer a frame.
                while ingest.step().unwrap() != Batch::End {
                    if ingest.counts.frames.is_multiple_of(64) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                done.store(true, Ordering::Release);
                ingest.counts.dropped
            });
            while !done.load(Ordering::Acquire) {
                recorder.step().unwrap();
            }
            let (disk, counts) = recorder.finish().unwrap();
            (producer.join().unwrap(), counts, disk.0)
        });
        assert_eq!(dropped, 0, "the recorder held the producer up");
        assert!(counts.frames_lost > 0, "the slow disk should cost frames");
        let gap_frames: u64 = counts.gaps.iter().map(|g| g.frames).sum();
        assert!(counts.gaps_unnamed > 0 || gap_frames == counts.frames_lost);
        let (_, numbers) = frames_in(&file);
        assert_eq!(numbers.len() as u64, counts.frames_written);
        assert_eq!(counts.frames_written + counts.frames_lost, total);
        assert!(numbers.windows(2).all(|w| w[0] < w[1]));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any interleaving of producer and recorder steps: every frame of the burst's span is
        /// written or counted lost, written frames are in order and byte-exact, gaps add up
        /// to the losses, and the producer never drops a frame.
        #[test]
        fn every_frame_is_written_or_counted_lost(
            before in 0u64..400,
            span in 0u64..300,
            steps in proptest::collection::vec((0u64..120, any::<bool>()), 1..40),
        ) {
            let link = link(64);
            let mut ingest = Ingest::new(&link, Generated(0, u64::MAX), ()).unwrap();
            for _ in 0..before {
                ingest.step().unwrap();
            }
            let first = edge_plus_slack(&link);
            let mut recorder = Recorder::start(&link, Vec::new(), &header(), Start::Oldest)
                .unwrap()
                .for_ticks(span * TICKS);
            for (frames, record) in steps {
                for _ in 0..frames {
                    ingest.step().unwrap();
                }
                if record {
                    recorder.step().unwrap();
                }
            }
            let published = link.buffer.published();
            let (file, counts) = recorder.finish().unwrap();
            let (_, numbers) = frames_in(&file);
            // The last frame of the burst is `span` frames after the newest at the request
            // (or the first one); the run may not have got that far.
            let end = (before.max(1) + span).min(published);
            prop_assert_eq!(ingest.counts.dropped, 0);
            prop_assert_eq!(numbers.len() as u64, counts.frames_written);
            let named: u64 = counts.gaps.iter().map(|g| g.frames).sum();
            prop_assume!(counts.gaps_unnamed == 0);
            prop_assert_eq!(named, counts.frames_lost);
            // Walk the file: each hole between frames written is the next named gap; the
            // last gap may reach past the end of the burst when no frame was written before
            // it (nothing then says where the window ends in frames).
            let mut gaps = counts.gaps.iter();
            let mut cursor = first;
            for &n in &numbers {
                prop_assert!(n >= cursor && n < end, "frame {} outside [{}, {})", n, cursor, end);
                if n > cursor {
                    prop_assert_eq!(gaps.next().map(|g| g.frames), Some(n - cursor));
                }
                cursor = n + 1;
            }
            if cursor < end {
                prop_assert!(gaps.next().is_some_and(|g| g.frames >= end - cursor));
            }
            prop_assert!(gaps.next().is_none());
        }
    }
}

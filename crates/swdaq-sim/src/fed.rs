//! CMS-style FED emulator: a set of front-end drivers that each send one fragment per
//! level-1 accept ([`swdaq_format::fed`]), at a trigger rate (fixed spacing or Poisson),
//! with per-FED size distributions (normal, truncated to whole words and at least the
//! header and trailer) and injected faults recorded as truth.
//!
//! Every emulator built from the same [`FedSimConfig`] sees the same sequence of level-1
//! accepts (trigger times and bunch crossings come from `(seed, event)` alone), so the FEDs
//! of several readout units, each emulated where it is read, agree on every event.

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use std::io::{Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use swdaq_format::SourceId;
use swdaq_format::fed::{
    FED_HEADER_SIZE, FED_L1_ID_MASK, FED_MIN_SIZE, FED_RAW_FILE_TYPE, FED_SOURCE_ID_MAX,
    FED_TRAILER_SIZE, FED_WORD, FedHeader, FedTrailer, seal_fed_fragment,
};
use swdaq_format::rawfile::{MAX_FRAME_SIZE, RawFileHeader, RawFileWriter};

/// LHC bunch crossings per orbit: bunch-crossing ids run 0..3564.
const BX_PER_ORBIT: u64 = 3564;

/// One FED: its id and fragment size distribution (bytes, header and trailer included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FedSpec {
    pub id: u16,
    pub mean_bytes: u32,
    pub spread_bytes: u32,
}

/// Fault rates (probability per fragment, at most one fault per fragment) and stops.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FedFaultRates {
    pub missing: f64,
    pub wrong_l1_id: f64,
    pub bad_crc: f64,
    pub bad_length: f64,
    /// FEDs that stop sending for good: (FED id, first event they no longer send).
    pub stops: Vec<(u16, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedSimConfig {
    pub feds: Vec<FedSpec>,
    /// Level-1 accept rate in Hz.
    pub trigger_rate_hz: f64,
    /// Poisson arrivals (exponential spacing) rather than fixed spacing.
    pub poisson: bool,
    pub seed: u64,
    #[serde(default)]
    pub faults: FedFaultRates,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FedConfigError {
    #[error("no FEDs configured")]
    NoFeds,
    #[error("FED id {0} does not fit in 12 bits")]
    IdTooLarge(u16),
    #[error("FED id {0} appears twice")]
    DuplicateId(u16),
    #[error(
        "trigger rate must be more than 0 and at most 40 MHz (the LHC's bunch crossings), got {0}"
    )]
    BadRate(f64),
    #[error("fault rate {name} = {value} is not a probability (or the rates sum above 1)")]
    BadFaultRate { name: &'static str, value: f64 },
}

impl FedSimConfig {
    /// `count` FEDs numbered from `first_id`, all with the same size distribution.
    pub fn uniform(first_id: u16, count: u16, mean_bytes: u32, spread_bytes: u32) -> Vec<FedSpec> {
        (0..count)
            .map(|i| FedSpec {
                id: first_id + i,
                mean_bytes,
                spread_bytes,
            })
            .collect()
    }

    pub fn validate(&self) -> Result<(), FedConfigError> {
        if self.feds.is_empty() {
            return Err(FedConfigError::NoFeds);
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.feds {
            if f.id > FED_SOURCE_ID_MAX {
                return Err(FedConfigError::IdTooLarge(f.id));
            }
            if !seen.insert(f.id) {
                return Err(FedConfigError::DuplicateId(f.id));
            }
        }
        if !(self.trigger_rate_hz > 0.0 && self.trigger_rate_hz <= crate::MAX_L1_RATE_HZ) {
            return Err(FedConfigError::BadRate(self.trigger_rate_hz));
        }
        let r = &self.faults;
        let rates = [
            ("missing", r.missing),
            ("wrong_l1_id", r.wrong_l1_id),
            ("bad_crc", r.bad_crc),
            ("bad_length", r.bad_length),
            ("sum", r.missing + r.wrong_l1_id + r.bad_crc + r.bad_length),
        ];
        for (name, value) in rates {
            if !(0.0..=1.0).contains(&value) {
                return Err(FedConfigError::BadFaultRate { name, value });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FedFaultKind {
    Missing,
    WrongL1Id,
    BadCrc,
    BadLength,
    /// The FED has stopped: no fragment from this event on.
    Stopped,
}

/// One injected fault, as truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FedFault {
    pub event: u64,
    pub fed: u16,
    pub kind: FedFaultKind,
}

/// The fragments of one level-1 accept from this emulator's FEDs.
#[derive(Debug, Default)]
pub struct FedEvent {
    /// Event number, from 1; the FED header carries its low 24 bits.
    pub event: u64,
    /// Trigger time in nanoseconds since the start of the run.
    pub trigger_ns: u64,
    pub bx_id: u16,
    /// Fragments back to back.
    pub bytes: Vec<u8>,
    /// (FED id, range in `bytes`) of each fragment sent, in configuration order.
    pub fragments: Vec<(u16, Range<usize>)>,
}

impl FedEvent {
    pub fn fragment(&self, index: usize) -> (u16, &[u8]) {
        let (id, range) = &self.fragments[index];
        (*id, &self.bytes[range.clone()])
    }
}

/// One level-1 accept, as every FED sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L1Accept {
    /// Event number, from 1; the FED header carries its low 24 bits.
    pub event: u64,
    /// Trigger time in nanoseconds since the start of the run.
    pub trigger_ns: u64,
    pub bx_id: u16,
}

/// What one FED sends for one level-1 accept, drawn before a byte is written: its size tells
/// a caller where the fragment goes ([`FedEmulator::write`] writes it there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FedFragmentPlan {
    pub fed: u16,
    /// Bytes, header and trailer included.
    pub size: usize,
    header: FedHeader,
    /// Where in the payload pool the payload starts.
    payload_at: usize,
    fault: Option<FedFaultKind>,
}

/// Random bytes payloads are cut from: drawing every word anew costs more than the checks
/// the emulator feeds (measured by `swdaq bench evb`), and content does not matter to them.
const PAYLOAD_POOL_BYTES: usize = 1 << 20;

pub struct FedEmulator {
    config: FedSimConfig,
    event: u64,
    trigger_ns: f64,
    timing_rng: Xoshiro256PlusPlus,
    payload_pool: Vec<u8>,
}

impl FedEmulator {
    pub fn new(config: FedSimConfig) -> Result<Self, FedConfigError> {
        config.validate()?;
        let mut pool_rng = Xoshiro256PlusPlus::seed_from_u64(mix(config.seed, 0, u64::MAX - 1));
        let payload_pool = (0..PAYLOAD_POOL_BYTES / FED_WORD)
            .flat_map(|_| pool_rng.random::<u64>().to_le_bytes())
            .collect();
        Ok(Self {
            timing_rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            config,
            event: 0,
            trigger_ns: 0.0,
            payload_pool,
        })
    }

    pub fn config(&self) -> &FedSimConfig {
        &self.config
    }

    /// Produces the next level-1 accept into `out` (reusing its buffers) and appends the
    /// faults injected into it to `truth`.
    pub fn next_event(&mut self, out: &mut FedEvent, truth: &mut Vec<FedFault>) {
        let accept = self.next_accept();
        out.event = accept.event;
        out.trigger_ns = accept.trigger_ns;
        out.bx_id = accept.bx_id;
        out.bytes.clear();
        out.fragments.clear();
        for index in 0..self.config.feds.len() {
            let Some(plan) = self.plan(&accept, index, truth) else {
                continue;
            };
            let start = out.bytes.len();
            out.bytes.resize(start + plan.size, 0);
            self.write(&plan, &mut out.bytes[start..]);
            out.fragments.push((plan.fed, start..start + plan.size));
        }
    }

    /// The next level-1 accept; its fragments come from [`Self::plan`] and [`Self::write`],
    /// FED by FED, each wherever its caller wants it.
    pub fn next_accept(&mut self) -> L1Accept {
        self.event += 1;
        let event = self.event;
        let spacing_ns = 1e9 / self.config.trigger_rate_hz;
        if self.config.poisson {
            let exp = Exp::new(1.0).expect("unit rate");
            self.trigger_ns += spacing_ns * exp.sample(&mut self.timing_rng);
        } else {
            self.trigger_ns += spacing_ns;
        }
        L1Accept {
            event,
            trigger_ns: self.trigger_ns as u64,
            bx_id: (mix(self.config.seed, event, u64::MAX) % BX_PER_ORBIT) as u16,
        }
    }

    /// What FED number `index` (in configuration order) sends for `accept`, with the fault
    /// injected into it appended to `truth`; `None` when it sends nothing (missing, stopped,
    /// or no such FED).
    pub fn plan(
        &self,
        accept: &L1Accept,
        index: usize,
        truth: &mut Vec<FedFault>,
    ) -> Option<FedFragmentPlan> {
        let spec = self.config.feds.get(index)?;
        let event = accept.event;
        let mut rng =
            Xoshiro256PlusPlus::seed_from_u64(mix(self.config.seed, event, spec.id as u64));
        let fault = self.fault_for(spec.id, event, &mut rng);
        if let Some(kind) = fault {
            truth.push(FedFault {
                event,
                fed: spec.id,
                kind,
            });
        }
        if matches!(fault, Some(FedFaultKind::Missing | FedFaultKind::Stopped)) {
            return None;
        }
        let size = fragment_size(spec, &mut rng);
        let payload_at = payload_start(self.payload_pool.len(), size - FED_MIN_SIZE, &mut rng);
        let mut l1_id = (event as u32) & FED_L1_ID_MASK;
        if fault == Some(FedFaultKind::WrongL1Id) {
            l1_id = (l1_id + 1 + rng.random_range(0..FED_L1_ID_MASK - 1)) & FED_L1_ID_MASK;
        }
        let header = FedHeader {
            event_type: 1,
            l1_id,
            bx_id: accept.bx_id,
            source_id: spec.id,
            version: 0,
            more_headers: false,
        };
        Some(FedFragmentPlan {
            fed: spec.id,
            size,
            header,
            payload_at,
            fault,
        })
    }

    /// Writes `plan`'s fragment at the start of `out` if it fits there, and returns its size
    /// either way (larger than `out`: nothing written), as a `FrameSource` reports a frame.
    pub fn write(&self, plan: &FedFragmentPlan, out: &mut [u8]) -> usize {
        let size = plan.size;
        let Some(fragment) = out.get_mut(..size) else {
            return size;
        };
        // The pool repeats for payloads beyond it (those start at its beginning).
        let mut from = plan.payload_at;
        for chunk in
            fragment[FED_HEADER_SIZE..size - FED_TRAILER_SIZE].chunks_mut(self.payload_pool.len())
        {
            chunk.copy_from_slice(&self.payload_pool[from..from + chunk.len()]);
            from = 0;
        }
        if seal_fed_fragment(fragment, &plan.header, &FedTrailer::default()).is_err() {
            // Not reached: sizes are whole words of at least header and trailer.
            return size;
        }
        let trailer = &mut fragment[size - FED_TRAILER_SIZE..];
        match plan.fault {
            // The CRC field's low byte is bits 16..24 of the trailer word.
            Some(FedFaultKind::BadCrc) => trailer[2] ^= 0x5A,
            // Bits 32..56 hold the length in words; one word more than was sent.
            Some(FedFaultKind::BadLength) => {
                let mut word = [0; FED_TRAILER_SIZE];
                word.copy_from_slice(trailer);
                let word = u64::from_le_bytes(word) + (1 << 32);
                trailer.copy_from_slice(&word.to_le_bytes());
            }
            _ => {}
        }
        size
    }

    fn fault_for(
        &self,
        fed: u16,
        event: u64,
        rng: &mut Xoshiro256PlusPlus,
    ) -> Option<FedFaultKind> {
        let f = &self.config.faults;
        if f.stops.iter().any(|&(id, from)| id == fed && event >= from) {
            return Some(FedFaultKind::Stopped);
        }
        let draw: f64 = rng.random();
        let mut edge = 0.0;
        for (rate, kind) in [
            (f.missing, FedFaultKind::Missing),
            (f.wrong_l1_id, FedFaultKind::WrongL1Id),
            (f.bad_crc, FedFaultKind::BadCrc),
            (f.bad_length, FedFaultKind::BadLength),
        ] {
            edge += rate;
            if draw < edge {
                return Some(kind);
            }
        }
        None
    }
}

impl crate::truth::CsvRecord for FedFault {
    const COLUMNS: &'static [&'static str] = &["event", "fed", "kind"];
}

#[derive(Debug, thiserror::Error)]
pub enum FedFilesError {
    #[error(transparent)]
    Config(#[from] FedConfigError),
    #[error("FED {fed} sent a fragment of {bytes} bytes: more than a raw file record may hold")]
    TooLarge { fed: u16, bytes: usize },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What [`write_fed_files`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FedFiles {
    /// (FED id, path, fragments written), in configuration order.
    pub files: Vec<(u16, PathBuf, u64)>,
    /// Faults injected, as truth.
    pub faults: Vec<FedFault>,
}

/// Path of FED `id`'s raw file in `dir`.
pub fn fed_raw_path(dir: &Path, id: u16) -> PathBuf {
    dir.join(format!("fed{id}.swraw"))
}

/// Writes `events` level-1 accepts of every configured FED, each FED to its own raw file in
/// `dir` ([`fed_raw_path`]: one record per fragment, as its link would deliver them; a
/// missing fragment is no record). Each file's header declares its largest fragment as the
/// frame size (what a reader sizes its buffer to), rewritten once the file is complete.
pub fn write_fed_files(
    config: FedSimConfig,
    events: u64,
    run: u32,
    dir: &Path,
) -> Result<FedFiles, FedFilesError> {
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| FedFilesError::Io { path, source }
    };
    let feds = config.feds.clone();
    let mut emulator = FedEmulator::new(config)?;
    let created_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut writers = Vec::with_capacity(feds.len());
    for spec in &feds {
        let path = fed_raw_path(dir, spec.id);
        let file = std::fs::File::create(&path).map_err(io_error(&path))?;
        let header = RawFileHeader {
            frame_type: FED_RAW_FILE_TYPE,
            frame_size: 0,
            source_id: SourceId::readout(u32::from(spec.id)),
            run_number: run,
            first_timestamp: 0,
            created_unix_ns,
        };
        let writer =
            RawFileWriter::new(std::io::BufWriter::new(file), &header).map_err(io_error(&path))?;
        writers.push((spec.id, path, header, writer, 0usize));
    }
    let (mut event, mut faults) = (FedEvent::default(), Vec::new());
    for _ in 0..events {
        emulator.next_event(&mut event, &mut faults);
        // Fragments come in configuration order, so one pass over the writers finds each.
        let mut sent = event.fragments.iter().peekable();
        for (id, path, _, writer, largest) in &mut writers {
            if let Some((_, range)) = sent.next_if(|(fed, _)| fed == id) {
                *largest = (*largest).max(range.len());
                writer
                    .write_frame(&event.bytes[range.clone()])
                    .map_err(io_error(path))?;
            }
        }
    }
    let mut files = Vec::with_capacity(writers.len());
    for (id, path, header, writer, largest) in writers {
        let written = writer.frames_written();
        let mut file = writer
            .finish()
            .and_then(|out| out.into_inner().map_err(|e| e.into_error()))
            .map_err(io_error(&path))?;
        if largest > MAX_FRAME_SIZE as usize {
            return Err(FedFilesError::TooLarge {
                fed: id,
                bytes: largest,
            });
        }
        // A FED that sent nothing still gets a valid header (a frame size is never 0).
        let header = RawFileHeader {
            frame_size: largest.max(FED_MIN_SIZE) as u32,
            ..header
        };
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&header.to_bytes()))
            .map_err(io_error(&path))?;
        files.push((id, path, written));
    }
    Ok(FedFiles { files, faults })
}

/// A distinct, well-mixed seed per (seed, event, stream).
fn mix(seed: u64, event: u64, stream: u64) -> u64 {
    seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(29)
}

/// A fragment size in bytes: normal(mean, spread), whole words, at least header + trailer.
fn fragment_size(spec: &FedSpec, rng: &mut Xoshiro256PlusPlus) -> usize {
    let normal: f64 = StandardNormal.sample(rng);
    let bytes = spec.mean_bytes as f64 + spec.spread_bytes as f64 * normal;
    let words = (bytes / FED_WORD as f64)
        .round()
        .max((FED_MIN_SIZE / FED_WORD) as f64);
    words as usize * FED_WORD
}

/// Where a payload of `bytes` (whole words) starts in a pool of `pool_len` bytes: a random
/// word, or the pool's start when the payload is larger (the pool then repeats).
fn payload_start(pool_len: usize, bytes: usize, rng: &mut Xoshiro256PlusPlus) -> usize {
    if bytes > pool_len {
        return 0;
    }
    rng.random_range(0..=(pool_len - bytes) / FED_WORD) * FED_WORD
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::fed::FedFragment;

    /// Every FED's file holds exactly the fragments it sent, in order; what the truth says is
    /// missing has no record and what it says is corrupt fails its check.
    #[test]
    fn fed_files_hold_what_each_fed_sent() {
        use swdaq_format::rawfile::RawFileReader;
        let dir = tempfile::tempdir().unwrap();
        let faults = FedFaultRates {
            missing: 0.02,
            bad_crc: 0.02,
            stops: vec![(102, 300), (103, 1)],
            ..Default::default()
        };
        let events = 500;
        let written = write_fed_files(config(faults), events, 9, dir.path()).unwrap();
        assert_eq!(written.files.len(), 4);
        for (id, path, count) in &written.files {
            let of = |kinds: &[FedFaultKind]| {
                let hit = |f: &&FedFault| f.fed == *id && kinds.contains(&f.kind);
                written.faults.iter().filter(hit).count() as u64
            };
            assert_eq!(
                *count,
                events - of(&[FedFaultKind::Missing, FedFaultKind::Stopped])
            );
            let mut reader = RawFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
            assert_eq!(reader.header().frame_type, FED_RAW_FILE_TYPE);
            assert_eq!(reader.header().run_number, 9);
            let (mut buf, mut records, mut bad_crc, mut last_l1) = (Vec::new(), 0, 0, 0);
            while reader.next_frame(&mut buf).unwrap() {
                let fragment = FedFragment::parse(&buf).unwrap();
                assert_eq!(fragment.header.source_id, *id);
                assert!(fragment.header.l1_id > last_l1);
                last_l1 = fragment.header.l1_id;
                bad_crc += u64::from(!fragment.crc_ok());
                records += 1;
            }
            assert_eq!(records, *count);
            assert_eq!(bad_crc, of(&[FedFaultKind::BadCrc]));
        }
        assert!(written.files[2].2 < 300);
        assert_eq!(written.files[3].2, 0);
    }

    /// Every FED fault kind, a FED that stops, and one FED larger than the payload pool.
    fn pinned_config() -> FedSimConfig {
        let mut config = config(FedFaultRates {
            missing: 0.03,
            wrong_l1_id: 0.03,
            bad_crc: 0.03,
            bad_length: 0.03,
            stops: vec![(102, 150)],
        });
        config.feds.push(FedSpec {
            id: 150,
            mean_bytes: (PAYLOAD_POOL_BYTES + 4096) as u32,
            spread_bytes: 64,
        });
        config
    }

    fn digest_faults(faults: &[FedFault], out: &mut Vec<u8>) {
        for f in faults {
            out.extend_from_slice(&f.event.to_le_bytes());
            out.extend_from_slice(&f.fed.to_le_bytes());
            out.push(f.kind as u8);
        }
    }

    /// The emulator's output for a seed is pinned, so a readout unit's links and `swdaq gen
    /// --format fed` files stay the same for the same seed: CRC32C of every event's number,
    /// trigger time, bunch crossing, fragments (FED, place, CRC32C of the bytes) and faults,
    /// as the emulator wrote them when it encoded each event into one buffer (main at
    /// f324547).
    #[test]
    fn the_same_seed_gives_the_pinned_fragments_and_truth() {
        let mut emu = FedEmulator::new(pinned_config()).unwrap();
        let (mut ev, mut truth, mut digest) = (FedEvent::default(), Vec::new(), Vec::new());
        for _ in 0..200 {
            let before = truth.len();
            emu.next_event(&mut ev, &mut truth);
            digest.extend_from_slice(&ev.event.to_le_bytes());
            digest.extend_from_slice(&ev.trigger_ns.to_le_bytes());
            digest.extend_from_slice(&ev.bx_id.to_le_bytes());
            for (i, (fed, range)) in ev.fragments.iter().enumerate() {
                digest.extend_from_slice(&fed.to_le_bytes());
                digest.extend_from_slice(&(range.start as u64).to_le_bytes());
                digest.extend_from_slice(&(range.end as u64).to_le_bytes());
                let crc = swdaq_format::crc::crc32c(ev.fragment(i).1);
                digest.extend_from_slice(&crc.to_le_bytes());
            }
            digest_faults(&truth[before..], &mut digest);
        }
        assert_eq!(
            (truth.len(), swdaq_format::crc::crc32c(&digest)),
            (172, 0xe905_6d2c)
        );
    }

    /// The same for `swdaq gen --format fed`'s files: every record of every FED's file, its
    /// header's frame size and the faults, pinned as main at f324547 wrote them.
    #[test]
    fn fed_files_for_the_same_seed_are_the_pinned_bytes() {
        use swdaq_format::rawfile::RawFileReader;
        let dir = tempfile::tempdir().unwrap();
        // Without the FED beyond the pool: a raw file record holds at most 1 MiB.
        let mut config = pinned_config();
        config.feds.pop();
        let written = write_fed_files(config, 200, 4, dir.path()).unwrap();
        let mut digest = Vec::new();
        for (id, path, count) in &written.files {
            let mut reader = RawFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
            digest.extend_from_slice(&id.to_le_bytes());
            digest.extend_from_slice(&count.to_le_bytes());
            digest.extend_from_slice(&reader.header().frame_size.to_le_bytes());
            let mut buf = Vec::new();
            while reader.next_frame(&mut buf).unwrap() {
                digest.extend_from_slice(&swdaq_format::crc::crc32c(&buf).to_le_bytes());
            }
        }
        digest_faults(&written.faults, &mut digest);
        assert_eq!(
            (written.faults.len(), swdaq_format::crc::crc32c(&digest)),
            (152, 0x5052_e936)
        );
    }

    fn config(faults: FedFaultRates) -> FedSimConfig {
        FedSimConfig {
            feds: FedSimConfig::uniform(100, 4, 1024, 128),
            trigger_rate_hz: 100_000.0,
            poisson: true,
            seed: 7,
            faults,
        }
    }

    #[test]
    fn clean_fragments_are_valid_and_numbered() {
        let mut emu = FedEmulator::new(config(FedFaultRates::default())).unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        let mut bytes = 0;
        for n in 1..=500u64 {
            emu.next_event(&mut ev, &mut truth);
            assert_eq!(ev.event, n);
            assert_eq!(ev.fragments.len(), 4);
            for i in 0..4 {
                let (id, raw) = ev.fragment(i);
                let f = FedFragment::parse(raw).unwrap();
                assert!(f.crc_ok());
                assert_eq!((f.header.source_id, f.header.l1_id), (id, n as u32));
                bytes += raw.len();
            }
        }
        assert!(truth.is_empty());
        let mean = bytes as f64 / 2000.0;
        assert!((mean - 1024.0).abs() < 20.0, "mean fragment size {mean}");
        // 500 Poisson spacings of 10 us: the total is within a few sigma of 5 ms.
        assert!(
            (ev.trigger_ns as f64 - 5e6).abs() < 5e6 * 0.2,
            "{}",
            ev.trigger_ns
        );
    }

    #[test]
    fn same_config_same_accepts_across_emulators_of_different_feds() {
        let mut a = FedEmulator::new(config(FedFaultRates::default())).unwrap();
        let mut cfg_b = config(FedFaultRates::default());
        cfg_b.feds = FedSimConfig::uniform(200, 2, 512, 0);
        let mut b = FedEmulator::new(cfg_b).unwrap();
        let (mut ea, mut eb, mut t) = (FedEvent::default(), FedEvent::default(), Vec::new());
        for _ in 0..100 {
            a.next_event(&mut ea, &mut t);
            b.next_event(&mut eb, &mut t);
            assert_eq!(
                (ea.event, ea.trigger_ns, ea.bx_id),
                (eb.event, eb.trigger_ns, eb.bx_id)
            );
        }
    }

    #[test]
    fn each_injected_fault_shows_as_described() {
        let faults = FedFaultRates {
            missing: 0.05,
            wrong_l1_id: 0.05,
            bad_crc: 0.05,
            bad_length: 0.05,
            stops: vec![(103, 300)],
        };
        let mut emu = FedEmulator::new(config(faults)).unwrap();
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        let mut seen = std::collections::HashMap::new();
        for _ in 0..400 {
            let before = truth.len();
            emu.next_event(&mut ev, &mut truth);
            for fault in &truth[before..] {
                *seen.entry(fault.kind).or_insert(0) += 1;
                let sent = ev.fragments.iter().position(|(id, _)| *id == fault.fed);
                let raw = sent.map(|i| ev.fragment(i).1);
                match fault.kind {
                    FedFaultKind::Missing | FedFaultKind::Stopped => assert!(raw.is_none()),
                    FedFaultKind::BadLength => assert!(FedFragment::parse(raw.unwrap()).is_err()),
                    FedFaultKind::BadCrc => {
                        assert!(!FedFragment::parse(raw.unwrap()).unwrap().crc_ok())
                    }
                    FedFaultKind::WrongL1Id => {
                        let f = FedFragment::parse(raw.unwrap()).unwrap();
                        assert!(f.crc_ok());
                        assert_ne!(f.header.l1_id, ev.event as u32);
                    }
                }
            }
        }
        assert_eq!(seen[&FedFaultKind::Stopped], 101);
        for kind in [
            FedFaultKind::Missing,
            FedFaultKind::WrongL1Id,
            FedFaultKind::BadCrc,
            FedFaultKind::BadLength,
        ] {
            assert!(seen[&kind] > 20, "{kind:?}: {seen:?}");
        }
    }

    /// A fragment written where its caller wants it is the one `next_event` appends; one
    /// larger than the buffer it is offered is not written, and its size says so.
    #[test]
    fn fragments_written_in_place_are_the_events_and_too_large_ones_are_not_written() {
        let faults = FedFaultRates {
            bad_crc: 0.1,
            bad_length: 0.1,
            ..Default::default()
        };
        let (mut whole, mut in_place) = (
            FedEmulator::new(config(faults.clone())).unwrap(),
            FedEmulator::new(config(faults)).unwrap(),
        );
        let (mut ev, mut truth) = (FedEvent::default(), Vec::new());
        let mut slot = vec![0u8; 4096];
        for _ in 0..100 {
            whole.next_event(&mut ev, &mut truth);
            let accept = in_place.next_accept();
            assert_eq!(
                (accept.event, accept.trigger_ns, accept.bx_id),
                (ev.event, ev.trigger_ns, ev.bx_id)
            );
            for index in 0..4 {
                let plan = in_place.plan(&accept, index, &mut Vec::new()).unwrap();
                assert_eq!(in_place.write(&plan, &mut slot), plan.size);
                assert_eq!(&slot[..plan.size], ev.fragment(index).1);
                let mut short = vec![0xEE; plan.size - 8];
                assert_eq!(in_place.write(&plan, &mut short), plan.size);
                assert!(short.iter().all(|&b| b == 0xEE));
            }
        }
        let accept = in_place.next_accept();
        assert!(
            in_place.plan(&accept, 4, &mut truth).is_none(),
            "no fifth FED"
        );
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = config(FedFaultRates::default());
        c.feds.push(c.feds[0]);
        assert_eq!(
            FedEmulator::new(c).err(),
            Some(FedConfigError::DuplicateId(100))
        );
        let mut c = config(FedFaultRates {
            missing: 0.7,
            bad_crc: 0.7,
            ..Default::default()
        });
        assert!(matches!(
            c.validate(),
            Err(FedConfigError::BadFaultRate { name: "sum", .. })
        ));
        c.faults = FedFaultRates::default();
        c.trigger_rate_hz = 0.0;
        assert!(matches!(c.validate(), Err(FedConfigError::BadRate(_))));
    }
}

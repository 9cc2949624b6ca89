//! The sections of the chain's configuration below `[run]`: where the links' frames come
//! from, the emulator, readout, hit finding, dataflow and storage, each key with its
//! default; `config` holds them together and checks them.

use crate::runtime::steering::MAX_SECONDS_AFTER;
use anyhow::bail;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use swdaq_dataflow::StorageFailurePolicy;
use swdaq_sim::SimConfig;
use swdaq_tpg::{Algorithm, NoisyConfig, PlaneAlgorithms, RoiConfig, ThresholdConfig};
use swdaq_trigger::trigger_type;

/// What feeds the links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Data generated at start by the emulator (see `[emulator]`) and replayed in a loop.
    #[default]
    Emulator,
    /// Raw files, link K from `<source.directory>/link<K>.swraw` (as `swdaq gen` writes them).
    File,
    /// UDP datagrams, one frame each; link K binds `source.udp_address`'s port + K (as
    /// `swdaq gen --udp` sends them).
    Udp,
}

/// The frame format of every link of the run: a TPC format (hit finding decodes it), or a
/// detector's own streaming board (`[source.board]`: its decoder and processor plugins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    #[default]
    Wibeth,
    Protowib,
    Board,
}

/// `[source.board]`: a detector's own streaming board (#35). Each link's datagrams are decoded
/// into time slices by `decoder` (a plugin or a packet format; each slice needs a timestamp),
/// kept as board frames, and searched for hits by `processor`'s plugin, whose primitives drive
/// the self-trigger like TPC hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BoardSection {
    /// The board's timestamp clock (Hz): windows, periodic triggers and buffer seconds count
    /// in its ticks.
    pub clock_hz: u64,
    /// The ticks one slice (one decoded fragment) spans: a slice not this much after the one
    /// before is a gap, flagged in the fragments that cover it.
    pub ticks_per_frame: u64,
    /// The ticks between two samples (a primitive's time over threshold becomes samples).
    pub ticks_per_sample: u64,
    /// The largest slice payload; a longer one is refused and counted.
    pub max_payload_bytes: u32,
    /// How long before the end of the slice that ends it a hit may start (ticks); 0: one
    /// slice. Primitives earlier than that are late: counted, not used.
    pub max_hit_ticks: u64,
    pub decoder: swdaq_plugin::DecoderSection,
    /// Optional: without it the links are read out by periodic or random triggers only.
    pub processor: Option<swdaq_plugin::ProcessorSection>,
}

impl Default for BoardSection {
    fn default() -> Self {
        Self {
            clock_hz: 0,
            ticks_per_frame: 0,
            ticks_per_sample: 1,
            max_payload_bytes: 8192,
            max_hit_ticks: 0,
            decoder: swdaq_plugin::DecoderSection::default(),
            processor: None,
        }
    }
}

impl BoardSection {
    /// The frames' facts as the readout needs them.
    pub fn frames(&self) -> swdaq_format::board_frame::BoardFrames {
        swdaq_format::board_frame::BoardFrames {
            max_payload: self.max_payload_bytes,
            ticks_per_frame: self.ticks_per_frame,
            ticks_per_sample: self.ticks_per_sample,
            clock_hz: self.clock_hz,
        }
    }

    /// A hit's longest reach back, in ticks.
    pub fn hit_ticks(&self) -> u64 {
        if self.max_hit_ticks == 0 {
            self.ticks_per_frame
        } else {
            self.max_hit_ticks
        }
    }

    /// Checks the numbers and loads the plugins once, so a missing file, a library that is
    /// not a plugin or a refused configuration stops the run at configure, naming the key.
    pub fn validate(&self, kind: SourceKind) -> anyhow::Result<()> {
        let refuse = |key: &str, why: &dyn std::fmt::Display| {
            anyhow::anyhow!("invalid configuration: source.board.{key}: {why}")
        };
        if kind != SourceKind::Udp {
            bail!(
                "invalid configuration: source.format = \"board\" needs source.kind = \"udp\": a board's packets arrive as datagrams"
            );
        }
        if self.clock_hz == 0 {
            return Err(refuse("clock_hz", &"must be set (the board's clock, Hz)"));
        }
        if self.ticks_per_frame == 0 || self.ticks_per_sample == 0 {
            return Err(refuse(
                "ticks_per_frame",
                &"ticks_per_frame and ticks_per_sample must be at least 1",
            ));
        }
        if !(1..=1 << 24).contains(&self.max_payload_bytes) {
            return Err(refuse("max_payload_bytes", &"must be 1..=16777216"));
        }
        self.decoder.make().map_err(|e| refuse("decoder", &e))?;
        if let Some(processor) = &self.processor {
            processor.make().map_err(|e| refuse("processor", &e))?;
        }
        Ok(())
    }
}

/// Where the links' frames come from. The number of links is `emulator.links` whatever the
/// kind; the channel map (offline channel numbers, planes) is `emulator.sim`'s, as in
/// `swdaq gen`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSection {
    /// `emulator`, `file` or `udp`.
    pub kind: SourceKind,
    /// `wibeth`, `protowib` (a file's header must agree) or `board` (see [`BoardSection`]).
    pub format: SourceFormat,
    /// `file`: the directory of the raw files (each read into memory at start).
    pub directory: PathBuf,
    /// `file`: pace frames at the detector's rate (otherwise as fast as readout takes them).
    pub real_time: bool,
    /// `file`: start again at the end, timestamps continuing (otherwise the end of every
    /// file ends the run).
    #[serde(rename = "loop")]
    pub loop_files: bool,
    /// `udp`: the address of link 0; link K binds port + K.
    pub udp_address: String,
    /// `udp`: data time of the first frame the front end sends (`swdaq gen --start-timestamp`).
    pub first_timestamp: u64,
    /// `truth_pulses.csv` of `swdaq gen` (same `emulator.sim`), to score hit finding against
    /// for `file` and `udp`; empty: the summary says there is no truth.
    pub truth: PathBuf,
    /// `format = "board"`: the board's clock, slices, decoder and processor.
    pub board: BoardSection,
}

impl Default for SourceSection {
    fn default() -> Self {
        Self {
            kind: SourceKind::Emulator,
            format: SourceFormat::Wibeth,
            directory: PathBuf::from("swdaq-data"),
            real_time: true,
            loop_files: false,
            udp_address: "127.0.0.1:50000".into(),
            first_timestamp: 0,
            truth: PathBuf::new(),
            board: BoardSection::default(),
        }
    }
}

impl SourceSection {
    /// Every link's frame format.
    pub fn frame_format(&self) -> swdaq_format::FrameFormat {
        match self.format {
            SourceFormat::Wibeth => swdaq_format::FrameFormat::WibEth,
            SourceFormat::Protowib => swdaq_format::FrameFormat::ProtoWib,
            SourceFormat::Board => swdaq_format::FrameFormat::Board(self.board.frames()),
        }
    }

    /// Where the links' data comes from, in a few words.
    pub fn describe(&self) -> String {
        match self.kind {
            SourceKind::Emulator => "the emulator".into(),
            SourceKind::File => format!(
                "the raw files in {}{}",
                self.directory.display(),
                if self.loop_files { ", looping" } else { "" }
            ),
            SourceKind::Udp => format!("UDP {} (port + link)", self.udp_address),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmulatorSection {
    /// Links of the run, whatever `source.kind` (emulated: 64 WIBEth channels each, 2 MHz
    /// sampling, 220 MB/s each).
    pub links: u32,
    /// Seconds of data generated per link at start and replayed in a loop (timestamps and
    /// sequence ids continue across passes).
    pub template_s: f64,
    /// Pace the links at the detector's real rate (otherwise as fast as readout takes them).
    pub real_time: bool,
    /// Links made to stop sending part-way through the run (a fault drill).
    pub stop_links: Vec<StopLink>,
    pub sim: SimConfig,
}

impl Default for EmulatorSection {
    fn default() -> Self {
        Self {
            links: 4,
            template_s: 0.1,
            real_time: true,
            stop_links: Vec::new(),
            sim: SimConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopLink {
    pub link: u32,
    pub after_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadoutSection {
    pub links_per_thread: u32,
    /// Core for each readout thread in order (empty: no pinning).
    pub pin_cores: Vec<usize>,
    /// Latency buffer depth per link, in seconds of data.
    pub buffer_s: f64,
    /// How long a data request waits for data that has not arrived before it is answered
    /// as it stands (flagged).
    pub request_timeout_ms: u64,
    /// Sleep of a readout thread when none of its links had a frame (real-time pacing).
    pub idle_sleep_us: u64,
    /// Answer raw-data requests with regions of interest around the TPs only.
    pub roi: RoiSection,
}

/// `[readout.roi]`: ROI readout (the ProtoDUNE talk's "poor man's ROI", `swdaq_tpg::roi`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoiSection {
    pub enabled: bool,
    /// Time is cut into blocks of this many samples; a block is active around a TP.
    pub block_samples: u32,
    /// Active blocks are widened by this many samples each side.
    pub margin_samples: u32,
    /// Channels are grouped by `offline channel / group_channels`.
    pub group_channels: u32,
}

impl Default for RoiSection {
    fn default() -> Self {
        let talk = RoiConfig::default();
        Self {
            enabled: false,
            block_samples: talk.block_samples,
            margin_samples: talk.margin_samples,
            group_channels: talk.group_channels,
        }
    }
}

impl RoiSection {
    pub fn regions(&self) -> RoiConfig {
        RoiConfig {
            block_samples: self.block_samples,
            margin_samples: self.margin_samples,
            group_channels: self.group_channels,
        }
    }

    /// Bounds that keep a request's wait for its TPs (margin + block) well inside a
    /// window's worth of data and the groups within a link's channel numbers.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure(
            (1..=4096).contains(&self.block_samples),
            "readout.roi.block_samples",
            "must be in 1..=4096",
        )?;
        ensure(
            self.margin_samples <= 65_536,
            "readout.roi.margin_samples",
            "must be <= 65536",
        )?;
        ensure(
            (1..=4096).contains(&self.group_channels),
            "readout.roi.group_channels",
            "must be in 1..=4096",
        )
    }
}

impl Default for ReadoutSection {
    fn default() -> Self {
        Self {
            links_per_thread: 4,
            pin_cores: Vec::new(),
            buffer_s: 1.0,
            request_timeout_ms: 500,
            idle_sleep_us: 200,
            roi: RoiSection::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HitFindingSection {
    /// The algorithm of each plane (`threshold`, `protodune`, `abs-running-sum`).
    pub algorithms: PlaneAlgorithms,
    /// Pedestal, hit length and the `threshold` algorithm's threshold.
    pub threshold: ThresholdConfig,
    /// Offline channel numbers never processed.
    pub masked_channels: Vec<u32>,
    /// Report channels whose TP rate stands far above their link's (see `noisy`).
    pub detect_noisy_channels: bool,
    pub noisy: NoisyConfig,
}

impl Default for HitFindingSection {
    fn default() -> Self {
        Self {
            algorithms: PlaneAlgorithms::uniform(Algorithm::Threshold),
            threshold: ThresholdConfig::default(),
            masked_channels: Vec::new(),
            detect_noisy_channels: true,
            noisy: NoisyConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataflowSection {
    /// Records requested but not yet accepted by storage (the trigger's credits).
    pub max_records_in_flight: u32,
    /// A record still missing fragments after this long is stored Incomplete.
    pub record_timeout_ms: u64,
}

impl Default for DataflowSection {
    fn default() -> Self {
        Self {
            max_records_in_flight: 8,
            record_timeout_ms: 2000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    pub enabled: bool,
    pub max_file_mb: u64,
    pub max_records_per_file: u64,
    /// Free space to leave on the output file system; records that would eat into it are
    /// refused (a clear error, not a half-written file).
    pub min_free_mb: u64,
    /// Crash safety: a record is readable from the open `.writing` file, whatever happens to
    /// the process, at most this long after it was written...
    pub flush_interval_ms: u64,
    /// ... or once this many more records are written; both 0: only when the file closes.
    pub flush_every_records: u64,
    /// Power loss: flush points and closes wait until the bytes are on the device.
    pub sync_to_disk: bool,
    pub queue_depth: usize,
    pub on_failure: StorageFailurePolicy,
}

impl Default for StorageSection {
    fn default() -> Self {
        Self {
            enabled: true,
            max_file_mb: 1024,
            max_records_per_file: 100,
            min_free_mb: 256,
            flush_interval_ms: 1000,
            flush_every_records: 64,
            sync_to_disk: true,
            queue_depth: 4,
            on_failure: StorageFailurePolicy::Stop,
        }
    }
}

pub(super) fn ensure(ok: bool, key: &str, reason: impl std::fmt::Display) -> anyhow::Result<()> {
    if !ok {
        bail!("invalid configuration: {key}: {reason}");
    }
    Ok(())
}

/// `[recording]`: raw bursts of every link's buffer on request (see `recording`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingSection {
    /// Off: `swdaq ctl record` is refused and no trigger type records.
    pub enabled: bool,
    /// Where bursts go; empty: `<run.output_dir>/recordings`.
    pub directory: PathBuf,
    /// Data time recorded after the request (the latency buffer before it is always taken).
    pub seconds_after: f64,
    /// Bursts in progress at once; a request beyond them is refused and counted. Each
    /// takes one reader of every link's latency buffer.
    pub max_concurrent: u32,
    /// Decisions carrying any of these trigger types (`periodic`, `random`,
    /// `multiplicity`, `adc-sum`, `track`) start a burst; empty: only commands do.
    pub on_trigger_types: Vec<String>,
}

impl Default for RecordingSection {
    fn default() -> Self {
        Self {
            enabled: false,
            directory: PathBuf::new(),
            seconds_after: 1.0,
            max_concurrent: 1,
            on_trigger_types: Vec::new(),
        }
    }
}

impl RecordingSection {
    pub fn validate(&self, distributed: bool) -> anyhow::Result<()> {
        let bad =
            |key: &str, why: &str| anyhow::anyhow!("invalid configuration: recording.{key}: {why}");
        if !(self.seconds_after > 0.0 && self.seconds_after <= MAX_SECONDS_AFTER) {
            return Err(bad("seconds_after", "must be in (0, 600]"));
        }
        // The request server and each burst hold a reader of every buffer.
        let readers = swdaq_readout::ring::MAX_READERS as u32 - 1;
        if !(1..=readers).contains(&self.max_concurrent) {
            return Err(bad("max_concurrent", &format!("must be 1..={readers}")));
        }
        for name in &self.on_trigger_types {
            if trigger_type::bit(name).is_none() {
                let known: Vec<_> = trigger_type::NAMED.iter().map(|(_, n)| *n).collect();
                return Err(bad(
                    "on_trigger_types",
                    &format!(
                        "unknown trigger type {name:?} (known: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
        if distributed && !self.on_trigger_types.is_empty() {
            return Err(bad(
                "on_trigger_types",
                "not available with [topology] applications (the trigger runs in another process); use `swdaq ctl record`",
            ));
        }
        Ok(())
    }

    /// The trigger-type bits that start a burst.
    pub fn trigger_mask(&self) -> u64 {
        self.on_trigger_types
            .iter()
            .filter_map(|n| trigger_type::bit(n))
            .fold(0, |mask, bit| mask | bit)
    }

    /// Where bursts go, for a run writing to `output_dir`.
    pub fn directory(&self, output_dir: &std::path::Path) -> PathBuf {
        if self.directory.as_os_str().is_empty() {
            output_dir.join("recordings")
        } else {
            self.directory.clone()
        }
    }
}

//! `swdaq run`'s configuration: one TOML document, every key with a built-in default, unknown
//! keys refused. `swdaq run --print-config` prints the effective configuration.

use crate::runtime::memory::MemoryPlan;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::Path;
use swdaq_trigger::TriggerConfig;

use super::sections::ensure;
pub use super::sections::{
    DataflowSection, EmulatorSection, HitFindingSection, ReadoutSection, RecordingSection,
    RoiSection, SourceFormat, SourceKind, SourceSection, StopLink, StorageSection,
};

use crate::run_section::RunSection;
use crate::runtime::dqm::DqmSection;
use crate::runtime::topology::TopologySection;

fn run_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RunSection, D::Error> {
    RunSection::deserialize_over(d, RunSection::default())
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    #[serde(deserialize_with = "run_over_defaults")]
    pub run: RunSection,
    /// Where every link's frames come from (the emulator unless told otherwise).
    pub source: SourceSection,
    pub emulator: EmulatorSection,
    pub readout: ReadoutSection,
    pub hit_finding: HitFindingSection,
    pub trigger: TriggerConfig,
    pub dataflow: DataflowSection,
    pub storage: StorageSection,
    /// Raw bursts of every link's buffer on request (`swdaq ctl record`, a trigger type).
    pub recording: RecordingSection,
    /// Applications in several processes and hosts; empty: the chain in one process.
    pub topology: TopologySection,
    /// Online data-quality monitoring of the built trigger records (in a topology: of the
    /// records the builders publish on their `record_stream`).
    pub dqm: DqmSection,
}

impl RunConfig {
    /// Reads a TOML file; unknown keys and wrong types name the key.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses a TOML document; an error names the line, shows it and says what was wrong.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        crate::run_section::parse(text, None)
    }

    /// Gives the run its number before anything is written: `run.number`, refused if it
    /// already has files, or with 0 the next one free (after `after` too: the last run this
    /// process started), in the output directory and, when recording, the bursts' directory.
    pub fn claim_run_number(&mut self, after: Option<u32>) -> anyhow::Result<u32> {
        let output = self.run.output_dir.clone();
        let recordings = self.recording.directory(&self.run.output_dir);
        let mut dirs = vec![output.as_path()];
        if self.recording.enabled {
            dirs.push(&recordings);
        }
        self.run.number = swdaq_format::run_files::claim_run(&dirs, self.run.number, after)?;
        Ok(self.run.number)
    }

    pub fn to_toml(&self) -> String {
        crate::runtime::model::to_toml(self)
    }

    /// Checks every value that could stop the run half-way, before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        let (emu, ro) = (&self.emulator, &self.readout);
        self.run.validate()?;
        ensure(
            (1..=64).contains(&emu.links),
            "emulator.links",
            "must be 1..=64",
        )?;
        ensure(
            emu.template_s >= 0.01 && emu.template_s <= 10.0,
            "emulator.template_s",
            "must be in [0.01, 10]",
        )?;
        for s in &emu.stop_links {
            ensure(
                s.link < emu.links,
                "emulator.stop_links.link",
                format!("link {} does not exist ({} links)", s.link, emu.links),
            )?;
            ensure(
                s.after_s >= 0.0 && s.after_s.is_finite(),
                "emulator.stop_links.after_s",
                "must be >= 0",
            )?;
        }
        if self.source.kind == SourceKind::Udp {
            let addr: std::net::SocketAddr =
                self.source.udp_address.parse().map_err(|e| {
                    anyhow::anyhow!("invalid configuration: source.udp_address: {e}")
                })?;
            ensure(
                u32::from(addr.port()) + emu.links <= 65_536 && addr.port() != 0,
                "source.udp_address",
                format!(
                    "port + link must be a port (1..=65535) for {} links",
                    emu.links
                ),
            )?;
        }
        if self.source.format == SourceFormat::Board {
            self.source.board.validate(self.source.kind)?;
            ensure(
                !self.readout.roi.enabled && !self.recording.enabled,
                "source.format",
                "board links have no ADCs for readout.roi and no raw bursts for [recording]: disable them",
            )?;
        }
        ensure(
            self.source.kind == SourceKind::Emulator || emu.stop_links.is_empty(),
            "emulator.stop_links",
            "only for source.kind = \"emulator\"",
        )?;
        emu.sim
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: emulator.sim: {e}"))?;
        ensure(
            ro.links_per_thread >= 1,
            "readout.links_per_thread",
            "must be >= 1",
        )?;
        let threads = emu.links.div_ceil(ro.links_per_thread) as usize;
        ensure(
            ro.pin_cores.is_empty() || ro.pin_cores.len() >= threads,
            "readout.pin_cores",
            format!("{threads} readout threads need {threads} cores, or none to not pin"),
        )?;
        let window = self.trigger.window_before_ticks + self.trigger.window_after_ticks;
        let clock_hz = self.source.frame_format().clock_hz();
        let buffer_ticks = ro.buffer_s * clock_hz;
        ensure(
            ro.buffer_s.is_finite() && buffer_ticks >= 4.0 * window as f64 && ro.buffer_s <= 60.0,
            "readout.buffer_s",
            format!(
                "must hold at least 4 readout windows ({:.4} s) and at most 60 s",
                4.0 * window as f64 / clock_hz
            ),
        )?;
        ensure(
            ro.request_timeout_ms >= 1,
            "readout.request_timeout_ms",
            "must be >= 1",
        )?;
        ensure(
            ro.idle_sleep_us <= 10_000,
            "readout.idle_sleep_us",
            "must be <= 10000",
        )?;
        ro.roi.validate()?;
        self.hit_finding
            .threshold
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: hit_finding.threshold: {e}"))?;
        self.hit_finding
            .algorithms
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: hit_finding.algorithms: {e}"))?;
        self.trigger
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        ensure(
            self.dataflow.max_records_in_flight >= 1,
            "dataflow.max_records_in_flight",
            "must be >= 1",
        )?;
        ensure(
            self.dataflow.record_timeout_ms > ro.request_timeout_ms,
            "dataflow.record_timeout_ms",
            "must be longer than readout.request_timeout_ms, so links answer before records time out",
        )?;
        ensure(
            self.storage.queue_depth >= 1,
            "storage.queue_depth",
            "must be >= 1",
        )?;
        ensure(
            self.storage.max_file_mb >= 1,
            "storage.max_file_mb",
            "must be >= 1",
        )?;
        self.recording.validate(self.topology.is_distributed())?;
        // In a topology the builders' record streams are sampled (`check_topology` asks each
        // for one): the chain's DQM runs with or without one.
        self.dqm.validate(self.run.number)?;
        super::apps::check_topology(self)?;
        self.topology.check_largest_message(
            self.link_fragment_bytes(),
            "a link's fragment of one readout window",
        )?;
        self.memory_plan().check()
    }

    /// One link's frames of one readout window: the largest fragment a readout sends.
    fn link_fragment_bytes(&self) -> u64 {
        let format = self.source.frame_format();
        let window = self.trigger.window_before_ticks + self.trigger.window_after_ticks;
        (window / format.ticks_per_frame() + 1).saturating_mul(format.frame_size() as u64)
    }

    /// What the sizes set here hold at most: every link's latency buffer, and the records
    /// queued for storage and in flight (a record: every link's frames of one window).
    fn memory_plan(&self) -> MemoryPlan {
        let format = self.source.frame_format();
        let links = u64::from(self.emulator.links);
        let frame = format.frame_size() as u64;
        let clock_hz = format.clock_hz();
        let buffer_frames = (self.readout.buffer_s * clock_hz) as u64 / format.ticks_per_frame();
        let record = links.saturating_mul(self.link_fragment_bytes());
        let mut plan = MemoryPlan::default();
        plan.add(
            "readout.buffer_s (frames, all links)",
            buffer_frames.saturating_mul(links),
            frame,
        )
        .add(
            "storage.queue_depth",
            self.storage.queue_depth as u64,
            record,
        )
        .add(
            "dataflow.max_records_in_flight",
            u64::from(self.dataflow.max_records_in_flight),
            record,
        );
        if self.dqm.enabled {
            plan.add("dqm.queue (sampled records)", self.dqm.queue as u64, record);
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_tpg::RoiConfig;

    #[test]
    fn the_default_is_valid_and_survives_a_toml_round_trip() {
        let c = RunConfig::default();
        c.validate().unwrap();
        assert_eq!(RunConfig::parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = RunConfig::parse("[readout]\nlinks_per_thred = 2\n").unwrap_err();
        assert!(e.to_string().contains("links_per_thred"), "{e}");
        // A value of the wrong type: its line and key, as written.
        for (text, key) in [
            ("[run]\nduration_s = \"ten\"\n", "duration_s = \"ten\""),
            ("[storage]\non_failure = 5\n", "on_failure = 5"),
        ] {
            let e = RunConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains("line 2") && e.contains(key), "{e}");
        }
        let mut c = RunConfig::default();
        c.emulator.links = 0;
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("emulator.links"), "{e}");
        let mut c = RunConfig::default();
        c.run.metrics_addr = "localhost".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("run.metrics_addr")
        );
        let mut c = RunConfig::default();
        c.readout.buffer_s = 0.001;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("readout.buffer_s")
        );
        let mut c = RunConfig::default();
        c.emulator.stop_links.push(StopLink {
            link: 9,
            after_s: 1.0,
        });
        assert!(c.validate().unwrap_err().to_string().contains("stop_links"));
    }

    proptest::proptest! {
        /// Whatever the file holds — garbage, or the default with a line cut or a value
        /// changed — parsing and checking give a value or an error, never a panic.
        #[test]
        fn any_text_is_a_config_or_an_error(
            garbage in ".{0,200}",
            cut in 0usize..200,
            value in "[-0-9.a-z\"]{0,12}",
        ) {
            let _ = RunConfig::parse(&garbage).map(|c| c.validate());
            let text = RunConfig::default().to_toml();
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let at = cut % lines.len();
            if let Some((key, _)) = lines[at].clone().split_once(" = ") {
                lines[at] = format!("{key} = {value}");
            }
            let _ = RunConfig::parse(&lines.join("\n")).map(|c| c.validate());
        }
    }

    #[test]
    fn each_plane_can_have_its_own_algorithm() {
        let c = RunConfig::parse(
            "[hit_finding.algorithms.collection]\nalgorithm = \"protodune\"\n\
             [hit_finding.algorithms.induction]\nalgorithm = \"abs-running-sum\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.hit_finding.algorithms.collection.name(), "protodune");
        assert_eq!(c.hit_finding.algorithms.induction.name(), "abs-running-sum");
        assert_eq!(RunConfig::parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn source_mistakes_name_the_key() {
        let e = RunConfig::parse("[source]\nkind = \"tcp\"\n").unwrap_err();
        assert!(e.to_string().contains("tcp"), "{e}");
        let e = RunConfig::parse("[source]\nformat = \"wib2\"\n").unwrap_err();
        assert!(e.to_string().contains("wib2"), "{e}");
        let e = RunConfig::parse("[source]\ndirectry = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("directry"), "{e}");
        let mut c = RunConfig::parse("[source]\nkind = \"udp\"\nudp_address = \"here\"\n").unwrap();
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("source.udp_address"), "{e}");
        c.source.udp_address = "127.0.0.1:65535".into();
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("source.udp_address"), "{e}");
        c.source.udp_address = "127.0.0.1:50000".into();
        c.validate().unwrap();
        c.emulator.stop_links.push(StopLink {
            link: 0,
            after_s: 1.0,
        });
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("emulator.stop_links"), "{e}");
        let c = RunConfig::parse(
            "[source]\nkind = \"file\"\nformat = \"protowib\"\nloop = true\nreal_time = false\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.source.loop_files && !c.source.real_time);
        assert_eq!(RunConfig::parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn the_shipped_source_configs_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("source-") {
                let c = RunConfig::load(&path).unwrap();
                c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_ne!(c.source.kind, SourceKind::Emulator, "{name}");
                checked += 1;
            }
        }
        assert!(checked >= 4, "{checked} source configs");
    }

    #[test]
    fn roi_readout_is_off_by_default_and_its_bad_values_name_the_key() {
        let c = RunConfig::default();
        assert!(!c.readout.roi.enabled);
        assert_eq!(c.readout.roi.regions(), RoiConfig::default());
        let c = RunConfig::parse("[readout.roi]\nenabled = true\nmargin_samples = 20\n").unwrap();
        c.validate().unwrap();
        assert_eq!(c.readout.roi.margin_samples, 20);
        assert_eq!(RunConfig::parse(&c.to_toml()).unwrap(), c);
        for (key, text) in [
            ("readout.roi.block_samples", "block_samples = 0"),
            ("readout.roi.group_channels", "group_channels = 0"),
            ("readout.roi.margin_samples", "margin_samples = 100000"),
        ] {
            let c = RunConfig::parse(&format!("[readout.roi]\n{text}\n")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        let e = RunConfig::parse("[readout.roi]\nmargin = 3\n").unwrap_err();
        assert!(format!("{e:#}").contains("margin"), "{e:#}");
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/roi.toml");
        let c = RunConfig::load(&shipped).unwrap();
        c.validate().unwrap();
        assert!(c.readout.roi.enabled);
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = RunConfig::load(Path::new("/nonexistent/swdaq.toml")).unwrap_err();
        assert!(
            format!("{e:#}").contains("/nonexistent/swdaq.toml"),
            "{e:#}"
        );
    }
}

//! The SW ROD run file (`configs/swrod.toml` is the commented example; with a
//! `[topology]` of `swrod`, `hltsv` and `hlt` applications, `configs/swrod-apps.toml`).

use super::aggregation::AggregatorSection;
use crate::run_section::{OldSpellings, RunSection};
use crate::runtime::dqm::DqmSection;
use crate::runtime::memory::MemoryPlan;
use crate::runtime::topology::TopologySection;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use swdaq_format::run_files::FlushPolicy;
use swdaq_sim::felix::FelixConfig;
use swdaq_swrod::RobConfig;
use swdaq_swrod::files::FileSettings;
use swdaq_swrod::trigger::LumiBlockLength;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwrodRunConfig {
    /// `duration_s` 0: until stopped or `swrod.max_l1as`.
    #[serde(deserialize_with = "run_over_defaults")]
    pub run: RunSection,
    pub swrod: SwrodSettings,
    /// Empty: one process. Otherwise the `swrod`, `hltsv` and `hlt` applications.
    pub topology: TopologySection,
    /// Online data-quality monitoring of the stored events (one process only).
    pub dqm: DqmSection,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwrodSettings {
    /// A new file when the current one would pass this size.
    pub max_file_mb: u64,
    /// Free space to leave on the output file system: events that would eat into it are not
    /// written, the file is closed with what it holds and the run's storage fails.
    pub min_free_mb: u64,
    /// Crash safety: an event is in its `.writing` file, whatever happens to the process, at
    /// most this long after it was stored...
    pub flush_interval_ms: u64,
    /// ... or once this many more events wait; both 0: only every 8 MiB and at close.
    pub flush_every_records: u64,
    /// Power loss: flush points and closes wait until the bytes are on the device.
    pub sync_to_disk: bool,
    /// The project tag that starts every file name (ATLAS's default: `data_test`).
    pub project: String,
    /// The storage application's name in file names and heads (ATLAS: `SFO-N`).
    pub app_name: String,
    /// Seconds a luminosity block lasts, unless `lumi_block_l1as` is set.
    pub lumi_block_s: f64,
    /// L1 accepts a luminosity block lasts (0: `lumi_block_s` decides).
    pub lumi_block_l1as: u64,
    pub cards: u16,
    /// Each card's e-links are split evenly over this many ROBs (a SW ROD thread each).
    pub robs_per_card: u16,
    /// L1 accepts per second of every card (0: as fast as the chain takes them).
    pub l1a_rate_hz: f64,
    /// Stop after this many L1 accepts (0: no limit).
    pub max_l1as: u64,
    /// Source id of the first ROB; the others follow.
    pub first_rob_source_id: u32,
    /// Ring slots, time-out and largest chunk of every ROB's aggregation.
    pub ring_slots: usize,
    pub timeout_fragments: usize,
    pub max_chunk_bytes: usize,
    /// Fragments each ROB's request server keeps for the HLT.
    pub request_store_fragments: usize,
    /// How long a ROB's request server holds a request for a fragment not built yet before
    /// answering `not_yet` (it answers as soon as the fragment is built; 0: at once).
    pub request_hold_ms: u64,
    /// Queue of each consumer of a ROB (a full queue is a slow consumer, counted).
    pub consumer_queue: usize,
    /// The HLT stores one event in this many (1: every event).
    pub hlt_accept_every: u64,
    pub hlt_max_in_flight: usize,
    pub hlt_retry_us: u64,
    pub hlt_give_up_ms: u64,
    /// The sampler checks one fragment in this many of each ROB.
    pub sample_every: u64,
    /// Fault-free L1 accepts at the end of the run: a chunk lost in the very last L1 accept
    /// cannot be told from its e-link going silent.
    pub clean_tail_l1as: u64,
    /// Every card's emulator; card `c` uses seed `felix.seed + c`. With file or TCP input,
    /// what the generator's cards are (e-links, chunk sizes, L1 ID and BCID offsets, ECRs).
    pub felix: FelixConfig,
    /// Where the cards' blocks come from.
    pub input: SwrodInput,
    /// How each ROB fragment's payload is built: a detector's plugin, or swdaq's chunk
    /// records (the default).
    pub aggregator: AggregatorSection,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwrodInputKind {
    /// Emulated cards in this process, paced at `l1a_rate_hz`.
    #[default]
    Emulator,
    /// Card K's raw file `card<K>.swraw` in `directory` (`swdaq gen --format felix`), read as
    /// fast as the SW ROD takes it; its truth `card<K>_faults.csv` beside it.
    File,
    /// Card K's FELIX server at `tcp_address`'s port + K (`swdaq gen --format felix --tcp`):
    /// each ROB subscribes to its e-links, the HLT's L1 accepts come from card 0's
    /// TTC-to-host e-link.
    Tcp,
}

/// `[swrod.input]`: the cards' blocks from the emulator, files or FELIX servers. With files
/// or servers, the L1 accepts are the cards' TTC-to-host records (`swdaq gen` always sends
/// them), and `l1a_rate_hz` and `clean_tail_l1as` are the generator's business.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwrodInput {
    pub kind: SwrodInputKind,
    /// File input: the generator's output directory.
    pub directory: PathBuf,
    /// TCP input: card 0's FELIX server (card K at port + K).
    pub tcp_address: Option<std::net::SocketAddr>,
    /// TCP input: the generator's output directory, where it writes `card<K>_faults.csv`
    /// before ending its publication ("" for none: nothing to score against).
    pub truth: PathBuf,
    /// TCP input: seconds to wait for every server to take the subscriptions.
    pub connect_timeout_s: f64,
    /// TCP input: seconds a lost connection is tried again before its card counts as ended.
    pub reconnect_s: f64,
}

impl Default for SwrodInput {
    fn default() -> Self {
        Self {
            kind: SwrodInputKind::Emulator,
            directory: PathBuf::new(),
            tcp_address: None,
            truth: PathBuf::new(),
            connect_timeout_s: 30.0,
            reconnect_s: 5.0,
        }
    }
}

impl SwrodInput {
    pub fn validate(&self, felix: &FelixConfig) -> anyhow::Result<()> {
        let seconds = |key: &str, v: f64| {
            anyhow::ensure!(
                v > 0.0 && v.is_finite(),
                "swrod.input.{key} = {v}: must be more than 0"
            );
            Ok(())
        };
        match self.kind {
            SwrodInputKind::Emulator => anyhow::ensure!(
                !felix.ttc_to_host,
                "swrod.felix.ttc_to_host: emulated cards give the HLT their L1 accepts directly; the TTC-to-host e-link is for `swdaq gen` (file and TCP input)"
            ),
            SwrodInputKind::File => anyhow::ensure!(
                !self.directory.as_os_str().is_empty(),
                "swrod.input.directory: file input needs the directory `swdaq gen --format felix` wrote"
            ),
            SwrodInputKind::Tcp => {
                anyhow::ensure!(
                    self.tcp_address.is_some(),
                    "swrod.input.tcp_address: TCP input needs card 0's FELIX server (host:port)"
                );
                seconds("connect_timeout_s", self.connect_timeout_s)?;
                seconds("reconnect_s", self.reconnect_s)?;
            }
        }
        if self.kind != SwrodInputKind::Emulator {
            anyhow::ensure!(
                felix.elinks <= swdaq_format::felix::TTC_TO_HOST_ELINK,
                "swrod.felix.elinks = {}: e-link {} is the cards' TTC-to-host e-link",
                felix.elinks,
                swdaq_format::felix::TTC_TO_HOST_ELINK
            );
        }
        Ok(())
    }
}

/// The longest fault-free tail a stop waits for: 10 s at 100 kHz.
const MAX_CLEAN_TAIL_L1AS: u64 = 1_000_000;

impl Default for SwrodRunConfig {
    fn default() -> Self {
        Self {
            run: RunSection::writing_to("swrod-data"),
            swrod: SwrodSettings::default(),
            topology: TopologySection::default(),
            dqm: DqmSection::default(),
        }
    }
}

impl Default for SwrodSettings {
    fn default() -> Self {
        Self {
            max_file_mb: 256,
            min_free_mb: 256,
            flush_interval_ms: 1000,
            flush_every_records: 64,
            sync_to_disk: true,
            project: "data_test".into(),
            app_name: "SFO-1".into(),
            lumi_block_s: 60.0,
            lumi_block_l1as: 0,
            cards: 1,
            robs_per_card: 1,
            l1a_rate_hz: 100e3,
            max_l1as: 0,
            first_rob_source_id: 0x0071_0000,
            ring_slots: 4096,
            timeout_fragments: 1024,
            max_chunk_bytes: 128,
            request_store_fragments: 16384,
            request_hold_ms: 500,
            consumer_queue: 4096,
            hlt_accept_every: 100,
            hlt_max_in_flight: 4096,
            hlt_retry_us: 200,
            hlt_give_up_ms: 2000,
            sample_every: 100,
            clean_tail_l1as: 16,
            felix: FelixConfig::default(),
            input: SwrodInput::default(),
            aggregator: AggregatorSection::default(),
        }
    }
}

impl SwrodSettings {
    /// The cards' block layout (`swrod.felix.mode`, `block_kib`); checked by `validate`.
    pub fn layout(&self) -> swdaq_format::felix::BlockLayout {
        self.felix
            .layout()
            .unwrap_or(swdaq_format::felix::BlockLayout::GBT)
    }

    /// The cards' block size in bytes.
    pub fn block_size(&self) -> usize {
        self.layout().block_size()
    }

    pub fn robs(&self) -> usize {
        usize::from(self.cards) * usize::from(self.robs_per_card)
    }

    /// How far the cards may run ahead of the L1 accepts given to the HLT (applications):
    /// a quarter of each ROB's request store, so that every fragment the HLT is sent for is
    /// still kept when it asks.
    pub fn l1a_lead(&self) -> u64 {
        (self.request_store_fragments as u64 / 4).max(1)
    }

    /// ROB `r` of card `card`'s place among the run's ROBs (card-major, as their source ids).
    pub fn rob_index(&self, card: u16, r: u16) -> usize {
        usize::from(card) * usize::from(self.robs_per_card) + usize::from(r)
    }

    /// E-links (card numbers) of ROB `r` of a card.
    pub fn rob_elinks(&self, r: u16) -> std::ops::Range<u16> {
        let per_rob = self.felix.elinks / self.robs_per_card;
        r * per_rob..(r + 1) * per_rob
    }

    pub fn lumi_block_length(&self) -> LumiBlockLength {
        if self.lumi_block_l1as > 0 {
            LumiBlockLength::L1as(self.lumi_block_l1as)
        } else {
            LumiBlockLength::Seconds(self.lumi_block_s)
        }
    }

    /// The storage's settings: physics_Main files of `run` in its output directory, each
    /// naming the run and the software that wrote it.
    pub fn file_settings(&self, run: &RunSection) -> FileSettings {
        let tag = swdaq_swrod::event::stream_tag();
        FileSettings {
            dir: run.output_dir.clone(),
            run_number: run.number,
            project: self.project.clone(),
            stream_type: tag.kind,
            stream_name: tag.name,
            app_name: self.app_name.clone(),
            max_file_bytes: self.max_file_mb << 20,
            flush: FlushPolicy::new(self.flush_interval_ms, self.flush_every_records),
            sync_to_disk: self.sync_to_disk,
            min_free_bytes: self.min_free_mb.saturating_mul(1 << 20),
            provenance: Some(run.provenance()),
        }
    }

    /// Aggregation settings of ROB `r` of card `card` in run `run_number`.
    pub fn rob_config(&self, card: u16, r: u16, run_number: u32) -> RobConfig {
        RobConfig {
            source_id: self.first_rob_source_id + self.rob_index(card, r) as u32,
            run_number,
            elinks: self.rob_elinks(r).collect(),
            l1id_offset: self.felix.l1id_offset,
            bcid_offset: self.felix.bcid_offset,
            max_chunk_bytes: self.max_chunk_bytes,
            ring_slots: self.ring_slots,
            timeout_fragments: self.timeout_fragments,
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.cards >= 1, "swrod.cards must be at least 1");
        anyhow::ensure!(
            self.robs_per_card >= 1 && self.felix.elinks.is_multiple_of(self.robs_per_card),
            "swrod.robs_per_card = {} must divide felix.elinks = {}",
            self.robs_per_card,
            self.felix.elinks
        );
        anyhow::ensure!(
            (0.0..=swdaq_sim::MAX_L1_RATE_HZ).contains(&self.l1a_rate_hz),
            "swrod.l1a_rate_hz = {}: must be 0 (as fast as the chain takes them) to 40 MHz (the LHC's bunch crossings)",
            self.l1a_rate_hz
        );
        anyhow::ensure!(
            self.clean_tail_l1as <= MAX_CLEAN_TAIL_L1AS,
            "swrod.clean_tail_l1as = {}: a stop waits for these L1 accepts, at most {MAX_CLEAN_TAIL_L1AS}",
            self.clean_tail_l1as
        );
        anyhow::ensure!(
            self.felix.chunk_max <= self.max_chunk_bytes,
            "swrod.max_chunk_bytes = {} must hold felix.chunk_max = {}",
            self.max_chunk_bytes,
            self.felix.chunk_max
        );
        anyhow::ensure!(
            self.max_file_mb >= 1,
            "swrod.max_file_mb must be at least 1"
        );
        self.lumi_block_length()
            .validate()
            .map_err(|e| anyhow::anyhow!("swrod.lumi_block_s / lumi_block_l1as: {e}"))?;
        for (key, v) in [("project", &self.project), ("app_name", &self.app_name)] {
            // Both are fields of ATLAS's dot-separated file names.
            anyhow::ensure!(
                !v.is_empty() && !v.contains(['.', '/']),
                "swrod.{key} = {v:?}: a field of the file names, not empty, without '.' or '/'"
            );
        }
        for (key, v) in [
            ("request_store_fragments", self.request_store_fragments),
            ("consumer_queue", self.consumer_queue),
            ("hlt_max_in_flight", self.hlt_max_in_flight),
        ] {
            anyhow::ensure!(v >= 1, "swrod.{key} must be at least 1");
        }
        anyhow::ensure!(
            self.hlt_accept_every >= 1 && self.sample_every >= 1,
            "swrod.hlt_accept_every and swrod.sample_every must be at least 1"
        );
        swdaq_sim::felix::FelixCard::new(self.felix.clone())?;
        self.input.validate(&self.felix)?;
        for r in 0..self.robs_per_card {
            // Any run: the number is not checked.
            self.rob_config(0, r, 0).validate()?;
        }
        self.memory_plan().check()?;
        // Last: loading the plugin runs its code, worth doing only for an otherwise sound run.
        self.aggregator.validate()
    }

    /// What the sizes set here hold at most, per ROB fragment (every e-link's largest chunk
    /// with its record head) and per event (every ROB's fragment).
    /// The largest ROB fragment: each of its e-links' chunk at `max_chunk_bytes`, with its
    /// record head.
    fn rob_fragment_bytes(&self) -> u64 {
        const RECORD_HEAD_BYTES: u64 = 8;
        let elinks_per_rob = u64::from(self.felix.elinks / self.robs_per_card.max(1));
        elinks_per_rob.saturating_mul(self.max_chunk_bytes as u64 + RECORD_HEAD_BYTES)
    }

    fn memory_plan(&self) -> MemoryPlan {
        let robs = u64::from(self.cards) * u64::from(self.robs_per_card);
        let fragment = self.rob_fragment_bytes();
        let event = robs.saturating_mul(fragment);
        let per_rob = |n: usize| robs.saturating_mul(n as u64);
        let mut plan = MemoryPlan::default();
        plan.add(
            "swrod.ring_slots (all ROBs)",
            per_rob(self.ring_slots),
            fragment,
        )
        .add(
            "swrod.request_store_fragments (all ROBs)",
            per_rob(self.request_store_fragments),
            fragment,
        )
        .add(
            "swrod.consumer_queue (all ROBs)",
            per_rob(self.consumer_queue),
            fragment,
        )
        .add(
            "swrod.hlt_max_in_flight",
            self.hlt_max_in_flight as u64,
            event,
        );
        plan
    }
}

fn run_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RunSection, D::Error> {
    RunSection::deserialize_over(d, SwrodRunConfig::default().run)
}

/// Where older SW ROD files kept the `[run]` keys (besides the top-level ones).
pub const OLD_SPELLINGS: OldSpellings = OldSpellings {
    table: "swrod",
    in_table: &[("run_number", "number"), ("output_dir", "output_dir")],
};

/// Parses and checks a SW ROD run's configuration; an error names the key.
pub fn parse(text: &str) -> anyhow::Result<SwrodRunConfig> {
    let config: SwrodRunConfig = crate::run_section::parse(text, Some(&OLD_SPELLINGS))?;
    config.validate()?;
    Ok(config)
}

impl SwrodRunConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        self.run.validate()?;
        self.swrod.validate()?;
        self.dqm.validate(self.run.number)?;
        super::apps::check_topology(self)?;
        self.topology.check_largest_message(
            self.swrod.rob_fragment_bytes(),
            "a ROB fragment (its e-links' chunks at swrod.max_chunk_bytes each)",
        )?;
        let status_words = 1 + self.swrod.felix.elinks.div_ceil(32) as usize;
        if let Some(bytes) = self.swrod.aggregator.largest_fragment_bytes(status_words) {
            self.topology.check_largest_message(
                bytes,
                "a ROB fragment of the aggregation plugin (swrod.aggregator.max_payload_bytes)",
            )?;
        }
        let emulated = self.swrod.input.kind == SwrodInputKind::Emulator;
        anyhow::ensure!(
            !self.topology.is_distributed() || !emulated || self.swrod.l1a_rate_hz > 0.0,
            "invalid configuration: swrod.l1a_rate_hz = 0 (as fast as the HLT takes them) runs in one process only: applications' cards and HLT supervisor each follow the L1A clock, which needs a rate"
        );
        anyhow::ensure!(
            !self.topology.is_distributed() || self.swrod.input.kind != SwrodInputKind::File,
            "invalid configuration: swrod.input.kind = \"file\" runs in one process only: SW ROD applications take their cards emulated or from FELIX servers (\"tcp\"), whose TTC-to-host e-link gives the HLT supervisor its L1 accepts"
        );
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        crate::runtime::model::to_toml(self)
    }
}

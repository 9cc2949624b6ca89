//! The event builder's settings: FEDs per readout unit, trigger, builder units, files.

use crate::decoded::DecoderConfigError;
use crate::farm::FarmConfig;
use crate::producer::Pacing;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use swdaq_format::provenance::Provenance;
use swdaq_plugin::DecoderSection;
use swdaq_sim::fed::{FedFaultRates, FedSimConfig, FedSpec};

/// The pacing tick unless configured: at most 1 ms of latency, far below any builder unit's
/// time-out. A wake-up costs tens of microseconds of CPU on the 2-core test VM: at 25 kHz
/// the builder spent 32 us per event at 1 ms, 37 us at 0.5 ms, 52-54 us waking per event
/// (BENCHMARKS.md).
pub const DEFAULT_PACING_TICK: Duration = Duration::from_millis(1);
/// A longer tick holds every event back that long: a run shorter than it makes none.
pub const MAX_PACING_TICK: Duration = Duration::from_secs(1);

/// What a writer does when the output directory's free space falls below the reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskFullPolicy {
    /// Stop the run (the default: nothing is thrown away silently).
    #[default]
    Stop,
    /// Keep running and drop built events until space returns, counting them.
    Shed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvbConfig {
    /// 0: the next run number free in `output` (a number with files there is refused). Not a
    /// key of `[evb]`: the run's (`[run] number` of swdaq's run file).
    #[serde(skip)]
    pub run: u32,
    /// FEDs of each readout unit; readout unit 0 is the event manager.
    pub rus: Vec<Vec<FedSpec>>,
    pub trigger_rate_hz: f64,
    pub poisson: bool,
    /// Follow the trigger clock; `false` emulates as fast as the builder units take events.
    pub paced: bool,
    /// Paced: fragments become readable once per tick of this length (milliseconds; trigger
    /// times rounded up to it), so the units wake once per tick, not once per event. Adds at
    /// most one tick of latency; 0 makes each event readable at its own trigger time.
    #[serde(with = "millis")]
    pub pacing_tick: Duration,
    pub seed: u64,
    pub faults: FedFaultRates,
    pub builder_units: u16,
    /// Events a builder unit asks for at a time.
    pub request_batch: u32,
    /// Events a builder unit holds at most (asked for, building, queued for its writer).
    pub bu_capacity: u32,
    /// Super-fragments a readout unit buffers before it stops reading its FEDs.
    pub ru_capacity: usize,
    /// How long a builder unit waits for an event's super-fragments before it writes it
    /// flagged incomplete.
    #[serde(with = "millis")]
    pub build_timeout: Duration,
    /// How long a readout unit keeps a super-fragment nobody asked for.
    #[serde(with = "millis")]
    pub ru_hold_timeout: Duration,
    pub events_per_file: u32,
    /// Lumi section length on the trigger clock (CMS: 2^18 orbits, 23.31 s).
    #[serde(with = "millis")]
    pub lumi_section: Duration,
    /// Output directory; each builder unit writes under `bu{N}/`. Not a key of `[evb]`: the
    /// run's (`[run] output_dir`).
    #[serde(skip)]
    pub output: PathBuf,
    pub min_free_bytes: u64,
    pub disk_full: DiskFullPolicy,
    /// Events to trigger; `None` runs until stopped (or, reading files, until they end).
    pub max_events: Option<u64>,
    /// The filter-farm stand-in that reads, checks and deletes closed files (off by default).
    pub farm: FarmConfig,
    /// Where the readout units' FEDs come from (`[evb.input]`).
    pub input: FedInputConfig,
    /// The run and the software, in every `.jsn` the builder units write (`jsn`). Not a key
    /// of `[evb]`: the run's.
    #[serde(skip)]
    pub provenance: Option<Provenance>,
}

/// Where FED fragments come from, as `[source]`'s `kind` says for the DUNE chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FedInputKind {
    /// Each readout unit emulates its FEDs (paced by the trigger clock when `paced`).
    #[default]
    Emulator,
    /// Each FED's raw file `fed<ID>.swraw` in `directory` (`swdaq gen --format fed`), read as
    /// fast as the builder units take events.
    File,
    /// One datagram per fragment; the FED that is `i`-th in `rus` (from 0, all readout units
    /// in order) listens on `udp_address`'s port + `i`.
    Udp,
    /// FEROL streams over TCP (`ferol_tcp`): each readout unit's FEDs, in order, in streams
    /// of `feds_per_stream`; stream `s` (from 0, all readout units in order) listens on
    /// `tcp_address`'s port + `s` and the FEROL connects to it.
    Tcp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FedInputConfig {
    pub kind: FedInputKind,
    pub directory: PathBuf,
    pub udp_address: Option<std::net::SocketAddr>,
    /// `kind = "tcp"`: the first stream's listening address (stream `s` on its port + `s`).
    pub tcp_address: Option<std::net::SocketAddr>,
    /// `kind = "tcp"`: FEDs one FEROL stream carries (each readout unit's FED count a
    /// multiple of it).
    pub feds_per_stream: usize,
    /// Fragments each FED's latency buffer holds (files, UDP, TCP; with TCP also the most
    /// a FED's stream queue holds before TCP holds its FEROL back).
    pub buffer_fragments: usize,
    /// Largest UDP or TCP fragment in bytes (a larger datagram is counted oversized; a
    /// longer FEROL fragment a FEROL length problem).
    pub max_fragment_bytes: usize,
    /// Datagrams one receive takes per FED (`recvmmsg`), 1 to 64; 1: one `recvmsg` each.
    pub udp_batch: usize,
    /// How long an event waits for a FED with nothing to read before it is taken as
    /// stopped (its fragments missing until it sends again). A stream whose every FED is
    /// silent is no event at all: the unit waits for data (`producer`).
    #[serde(with = "millis")]
    pub stop_wait: Duration,
    /// The number of each FED's first event (a board counting triggers from 0 says 0).
    pub first_event: u64,
    /// A detector's own front ends (UDP): the plugin or packet format that decodes each
    /// FED's datagrams into fragments numbered by event (`decoded`).
    pub decoder: Option<DecoderSection>,
}

impl Default for FedInputConfig {
    fn default() -> Self {
        Self {
            kind: FedInputKind::Emulator,
            directory: PathBuf::new(),
            udp_address: None,
            tcp_address: None,
            feds_per_stream: 1,
            buffer_fragments: 1024,
            max_fragment_bytes: 16 << 10,
            udp_batch: swdaq_readout::udp::DEFAULT_BATCH,
            stop_wait: Duration::from_millis(100),
            first_event: 1,
            decoder: None,
        }
    }
}

/// The default output directory: RAM-backed when `/dev/shm` exists.
pub fn default_output() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm.join("swdaq-evb")
    } else {
        std::env::temp_dir().join("swdaq-evb")
    }
}

impl Default for EvbConfig {
    fn default() -> Self {
        Self {
            run: 0,
            rus: (0..2)
                .map(|r| FedSimConfig::uniform(100 * (r + 1), 4, 1024, 128))
                .collect(),
            trigger_rate_hz: 100e3,
            poisson: true,
            paced: true,
            pacing_tick: DEFAULT_PACING_TICK,
            seed: 1,
            faults: FedFaultRates::default(),
            builder_units: 2,
            request_batch: 32,
            bu_capacity: 512,
            ru_capacity: 8192,
            build_timeout: Duration::from_millis(500),
            ru_hold_timeout: Duration::from_secs(5),
            events_per_file: 100,
            lumi_section: Duration::from_micros(23_310_000),
            output: default_output(),
            min_free_bytes: 256 << 20,
            disk_full: DiskFullPolicy::Stop,
            max_events: None,
            farm: FarmConfig::default(),
            input: FedInputConfig::default(),
            provenance: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvbConfigError {
    #[error("need at least one readout unit and one builder unit")]
    Empty,
    #[error("request_batch ({batch}) must be at least 1 and at most bu_capacity ({capacity})")]
    Batch { batch: u32, capacity: u32 },
    #[error("events_per_file, ru_capacity and lumi_section must be positive")]
    ZeroSize,
    #[error("pacing_tick = {0:?}: at most {max:?} (fragments are readable once per tick)", max = MAX_PACING_TICK)]
    PacingTick(Duration),
    #[error("[evb.input] kind = \"{0}\" needs `{1}`")]
    Input(&'static str, &'static str),
    #[error("[evb.input] udp_batch = {0}: must be 1 to {max}", max = swdaq_readout::udp::MAX_BATCH)]
    UdpBatch(usize),
    #[error(
        "[evb.input] feds_per_stream = {per}: readout unit {ru}'s {feds} FEDs must fill whole streams (a multiple of it, at least 1)"
    )]
    FedsPerStream { ru: usize, feds: usize, per: usize },
    #[error(
        "[evb.input.decoder] needs kind = \"udp\": files, FEROL streams and emulated FEDs hold FED fragments"
    )]
    DecoderInput,
    #[error(transparent)]
    Decoder(#[from] DecoderConfigError),
    #[error("[evb.farm.filter] needs the farm: [evb.farm] consumers of at least 1")]
    FilterWithoutFarm,
    #[error("{0}")]
    Filter(String),
    #[error("readout unit {ru}: {source}")]
    Feds {
        ru: usize,
        source: swdaq_sim::fed::FedConfigError,
    },
}

impl EvbConfig {
    /// How the emulated FEDs follow the trigger clock.
    pub fn pacing(&self) -> Pacing {
        if self.paced {
            Pacing::Tick(self.pacing_tick)
        } else {
            Pacing::FlatOut
        }
    }

    /// The FED emulator settings of readout unit `ru`.
    pub fn fed_sim(&self, ru: usize) -> FedSimConfig {
        FedSimConfig {
            feds: self.rus[ru].clone(),
            trigger_rate_hz: self.trigger_rate_hz,
            poisson: self.poisson,
            seed: self.seed,
            faults: self.faults.clone(),
        }
    }

    pub fn validate(&self) -> Result<(), EvbConfigError> {
        if self.rus.is_empty() || self.builder_units == 0 {
            return Err(EvbConfigError::Empty);
        }
        if self.request_batch == 0 || self.request_batch > self.bu_capacity {
            return Err(EvbConfigError::Batch {
                batch: self.request_batch,
                capacity: self.bu_capacity,
            });
        }
        if self.events_per_file == 0 || self.ru_capacity == 0 || self.lumi_section.is_zero() {
            return Err(EvbConfigError::ZeroSize);
        }
        if self.pacing_tick > MAX_PACING_TICK {
            return Err(EvbConfigError::PacingTick(self.pacing_tick));
        }
        match self.input.kind {
            FedInputKind::File if self.input.directory.as_os_str().is_empty() => {
                return Err(EvbConfigError::Input("file", "directory"));
            }
            FedInputKind::Udp if self.input.udp_address.is_none() => {
                return Err(EvbConfigError::Input("udp", "udp_address"));
            }
            FedInputKind::Udp
                if !(1..=swdaq_readout::udp::MAX_BATCH).contains(&self.input.udp_batch) =>
            {
                return Err(EvbConfigError::UdpBatch(self.input.udp_batch));
            }
            FedInputKind::Tcp if self.input.tcp_address.is_none() => {
                return Err(EvbConfigError::Input("tcp", "tcp_address"));
            }
            FedInputKind::Tcp => {
                let per = self.input.feds_per_stream;
                if let Some(ru) = self
                    .rus
                    .iter()
                    .position(|feds| per == 0 || !feds.len().is_multiple_of(per))
                {
                    return Err(EvbConfigError::FedsPerStream {
                        ru,
                        feds: self.rus[ru].len(),
                        per,
                    });
                }
            }
            _ => {}
        }
        if let Some(decoder) = &self.input.decoder {
            if self.input.kind != FedInputKind::Udp {
                return Err(EvbConfigError::DecoderInput);
            }
            // Made once as every FED's link will make it: a plugin that cannot be loaded or
            // refuses its configuration stops the run before it starts.
            decoder.make().map_err(DecoderConfigError)?;
        }
        if let Some(filter) = &self.farm.filter {
            if self.farm.consumers == 0 {
                return Err(EvbConfigError::FilterWithoutFarm);
            }
            filter.make().map_err(EvbConfigError::Filter)?;
        }
        for ru in 0..self.rus.len() {
            self.fed_sim(ru)
                .validate()
                .map_err(|source| EvbConfigError::Feds { ru, source })?;
        }
        Ok(())
    }

    /// Lumi section (from 1) of a trigger time.
    pub fn lumi_of(&self, trigger_ns: u64) -> u32 {
        1 + (trigger_ns / self.lumi_section.as_nanos().max(1) as u64) as u32
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1e3).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_input_needs_an_address_and_whole_streams() {
        let mut config = EvbConfig {
            input: FedInputConfig {
                kind: FedInputKind::Tcp,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            config.validate(),
            Err(EvbConfigError::Input("tcp", "tcp_address"))
        );
        config.input.tcp_address = Some("127.0.0.1:47100".parse().unwrap());
        assert_eq!(config.validate(), Ok(()));
        let feds = config.rus[0].len();
        config.input.feds_per_stream = feds + 1;
        let refused = config.validate().unwrap_err();
        assert!(refused.to_string().contains("feds_per_stream"), "{refused}");
        config.input.feds_per_stream = 0;
        assert!(config.validate().is_err());
    }

    #[test]
    fn a_udp_input_needs_an_address_and_a_batch_recvmmsg_can_take() {
        let mut config = EvbConfig {
            input: FedInputConfig {
                kind: FedInputKind::Udp,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            config.validate(),
            Err(EvbConfigError::Input("udp", "udp_address"))
        );
        config.input.udp_address = Some("127.0.0.1:9000".parse().unwrap());
        for (batch, ok) in [(0, false), (1, true), (64, true), (65, false)] {
            config.input.udp_batch = batch;
            let expected = if ok {
                Ok(())
            } else {
                Err(EvbConfigError::UdpBatch(batch))
            };
            assert_eq!(config.validate(), expected, "udp_batch {batch}");
        }
    }
}

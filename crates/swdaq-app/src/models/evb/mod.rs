//! The CMS-style event builder: emulated FEDs (or FED files, or FEDs over UDP) -> readout
//! units -> event manager -> builder units -> FRD files with the CMS bookkeeping, in one
//! process or as `evm`, `ru` and `bu` applications (`apps`). Its keys: `config`; its runs:
//! `system`; its live figures: `live`; its closing summary: `summary`.

pub mod apps;
pub mod config;
pub mod live;
pub mod summary;
pub mod system;
pub mod wire;

use crate::run_section::RunSection;
use crate::runtime::model::{Capabilities, Configured, Model, ModelOf, Outcome, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::TopologySection;
use crate::stored::{self, StoredEvent, StoredFragment};
use config::EvbRunConfig;
use swdaq_evb::config::FedInputKind;
use swdaq_format::input_file::MappedFile;
use system::AppsSummary;

pub static EVB: ModelOf<EvbRunConfig> = ModelOf::new(
    "evb",
    "CMS-style event builder",
    Some("evb"),
    config::parse,
    Some(&config::OLD_SPELLINGS),
)
.with_dashboard(include_str!("dashboard.json"))
.with_alerts(include_str!("alerts.json"));

impl Configured for EvbRunConfig {
    fn model(&self) -> &'static dyn Model {
        &EVB
    }

    fn run_section(&self) -> &RunSection {
        &self.run
    }

    fn run_section_mut(&mut self) -> &mut RunSection {
        &mut self.run
    }

    fn set_links(&mut self, n: u32) -> anyhow::Result<()> {
        anyhow::bail!(
            "--links {n}: the event builder reads FEDs, not links: list each readout unit's FED ids in evb.rus"
        )
    }

    fn validate(&self) -> anyhow::Result<()> {
        EvbRunConfig::validate(self)
    }

    fn to_toml(&self) -> String {
        EvbRunConfig::to_toml(self)
    }

    fn topology(&self) -> &TopologySection {
        &self.topology
    }

    fn describe(&self) -> String {
        format!(
            "{} readout units, {} builder units, {} Hz{}{}, {}, writing to {}",
            self.evb.rus.len(),
            self.evb.builder_units,
            self.evb.trigger_rate_hz,
            if self.evb.paced {
                ""
            } else {
                " (not paced: as fast as it builds)"
            },
            if self.is_distributed() {
                format!(" in {} applications", self.topology.apps.len())
            } else {
                String::new()
            },
            crate::runtime::model::duration_words(self.run.duration_s),
            self.run.output_dir.display()
        )
    }

    fn steering(&self) -> Capabilities {
        let input = &self.evb.input;
        Capabilities {
            // Only emulated FEDs paced by the trigger clock have a trigger to hold; files and
            // UDP streams come as they come, and flat out there is no clock.
            pause_resume: if input.kind != FedInputKind::Emulator {
                let from = match input.kind {
                    FedInputKind::File => "raw files",
                    FedInputKind::Tcp => "FEROL streams over TCP",
                    _ => "UDP",
                };
                Err(format!(
                    "the event builder pauses only emulated FEDs: its FEDs come from {from} (evb.input.kind)"
                ))
            } else if !self.evb.paced {
                Err("the event builder pauses only a paced trigger: this run is not paced (evb.paced = false)".into())
            } else {
                Ok(())
            },
            trigger_change: Err(system::NO_TRIGGER_SOURCES.into()),
            record: Err("the event builder has no raw bursts (they are the chain's)".into()),
        }
    }

    /// The last whole event of the newest FRD file (closed, or still written as `.raw.tmp`).
    fn stored_event(&self, run: u32) -> Result<StoredEvent, String> {
        stored::newest_event(
            &self.output_dirs(),
            run,
            &[".raw", ".raw.tmp"],
            |file, _| {
                let mapped = MappedFile::open(file).map_err(|e| e.to_string())?;
                Ok(swdaq_evb::inspect::newest_event(&mapped).map(|e| {
                    let mut left_out = Vec::new();
                    if !e.crc_ok {
                        left_out.push(format!("event {}: its CRC32C fails", e.event));
                    }
                    left_out.extend(e.fed_error.map(|why| format!("event {}: {why}", e.event)));
                    // The configured FEDs the event lacks (stopped, rejected or lost).
                    let present: Vec<u16> = e.feds.iter().map(|f| f.source_id).collect();
                    left_out.extend(
                        self.evb
                            .rus
                            .iter()
                            .flatten()
                            .filter(|fed| !present.contains(&fed.id))
                            .map(|fed| format!("FED {} missing", fed.id)),
                    );
                    StoredEvent {
                        file: file.to_path_buf(),
                        event: e.event.into(),
                        bytes: e.bytes.into(),
                        fragments: e
                            .feds
                            .iter()
                            .map(|f| StoredFragment {
                                source: format!("FED {}", f.source_id),
                                bytes: f.bytes as u64,
                            })
                            .collect(),
                        left_out,
                        picture: None,
                    }
                }))
            },
        )
    }

    fn run(&self, stop: &StopRequest, hooks: &dyn RunHooks) -> anyhow::Result<Box<dyn Outcome>> {
        if let Some(warning) = swdaq_evb::ramdisk::advice(&self.run.output_dir) {
            eprintln!("{warning}");
        }
        let summary = if self.is_distributed() {
            let exe = crate::runtime::launch::current_exe()?;
            system::run_apps(self, &exe, stop, hooks)?
        } else {
            let (evb, stop_reason, dqm) = system::run_one_process(self, stop, hooks)?;
            AppsSummary::one_process(evb, stop_reason, dqm)
        };
        Ok(Box::new(EvbOutcome {
            run_number: self.run.number,
            summary,
        }))
    }
}

/// How a run of the event builder ended.
pub struct EvbOutcome {
    pub run_number: u32,
    pub summary: AppsSummary,
}

impl Outcome for EvbOutcome {
    fn run_number(&self) -> u32 {
        self.run_number
    }

    fn stop_reason(&self) -> &StopReason {
        &self.summary.stop_reason
    }

    fn text(&self) -> String {
        self.summary.text()
    }

    fn model(&self) -> &'static str {
        EVB.name()
    }

    fn figures(&self) -> serde_json::Value {
        self.summary.json()
    }

    fn failure(&self) -> Option<String> {
        let evb = &self.summary.evb;
        let writer_error = evb
            .writers
            .iter()
            .find_map(|w| w.error.as_ref().map(|e| e.to_string()));
        // A truncated input ends its FED early: the events after the cut lack it.
        let truncated = || {
            let feds: Vec<String> = evb
                .feds
                .iter()
                .filter(|(_, _, c)| c.ingest.truncated > 0)
                .map(|(_, fed, _)| fed.to_string())
                .collect();
            (!feds.is_empty()).then(|| {
                format!(
                    "the input of FED {} ended part-way through a record (a truncated file): its later events lack it",
                    feds.join(", ")
                )
            })
        };
        writer_error.or_else(truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::apps::{BU, EVM, RU};
    use super::config::{EvbRunConfig, parse};
    use super::summary::summary_text;
    use super::system::run_one_process;
    use super::*;
    use crate::runtime::topology::App;
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn load(path: &Path) -> EvbRunConfig {
        parse(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn run(config: &EvbRunConfig) -> (swdaq_evb::EvbSummary, StopReason) {
        let (summary, stop_reason, _) =
            run_one_process(config, &StopRequest::default(), &()).unwrap();
        (summary, stop_reason)
    }

    /// `readout_units` readout units and `builder_units` builder units, with `apps`.
    fn check(
        apps: &[(&str, &str)],
        readout_units: usize,
        builder_units: u16,
    ) -> anyhow::Result<()> {
        let mut config = EvbRunConfig::default();
        config.evb.rus = vec![Vec::new(); readout_units];
        config.evb.builder_units = builder_units;
        config.topology.apps = (apps.iter().zip(7200..))
            .map(|(&(name, kind), port)| App::new(name, kind, format!("tcp://127.0.0.1:{port}")))
            .collect();
        crate::runtime::app::check_kinds(&config, apps::KINDS)
    }

    #[test]
    fn an_event_builder_topology_has_one_evm_and_the_configured_units() {
        let t = [("evm", EVM), ("ru-1", RU), ("bu-0", BU), ("bu-1", BU)];
        check(&t, 2, 2).unwrap();
        let e = check(&t, 3, 2).unwrap_err().to_string();
        assert!(
            e.contains("1 ru applications; there must be exactly 2"),
            "{e}"
        );
        let e = check(&t, 2, 1).unwrap_err().to_string();
        assert!(e.contains("bu applications"), "{e}");
        let mut wrong = t;
        wrong[1].1 = "builder";
        let e = check(&wrong, 2, 2).unwrap_err().to_string();
        assert!(e.contains("do not belong"), "{e}");
        let mut no_evm = t;
        no_evm[0].1 = RU;
        assert!(
            check(&no_evm, 3, 2)
                .unwrap_err()
                .to_string()
                .contains("evm")
        );
    }

    #[test]
    fn shipped_applications_config_is_a_valid_event_builder_topology() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-apps.toml");
        let config = load(&path);
        let kinds: Vec<&str> = config
            .topology
            .apps
            .iter()
            .map(|a| a.kind.as_str())
            .collect();
        assert_eq!(kinds, [EVM, RU, BU, BU]);
        assert_eq!(
            (
                config.evb.rus.len(),
                config.evb.rus[0].len(),
                config.evb.builder_units
            ),
            (2, 4, 2)
        );
        // What the applications read back from the launcher is the same configuration.
        assert_eq!(
            parse(&toml::to_string_pretty(&config).unwrap()).unwrap(),
            config
        );
        let mut wrong = config.clone();
        wrong.evb.builder_units = 3;
        assert!(parse(&toml::to_string_pretty(&wrong).unwrap()).is_err());
        // Each builder unit application runs its own farm stand-in.
        let mut farm = config.clone();
        farm.evb.farm.consumers = 1;
        assert!(parse(&toml::to_string_pretty(&farm).unwrap()).is_ok());
    }

    /// Only emulated FEDs paced by the trigger clock can be paused; otherwise the refusal
    /// says why.
    #[test]
    fn pause_is_offered_for_paced_emulated_feds_only() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb.toml");
        let config = load(&path);
        assert!(config.evb.paced);
        assert_eq!(config.steering().pause_resume, Ok(()));
        let mut files = config.clone();
        files.evb.input.kind = FedInputKind::File;
        let why = files.steering().pause_resume.unwrap_err();
        assert!(why.contains("raw files"), "{why}");
        let mut flat_out = config;
        flat_out.evb.paced = false;
        let why = flat_out.steering().pause_resume.unwrap_err();
        assert!(why.contains("evb.paced = false"), "{why}");
    }

    #[test]
    fn shipped_files_config_reads_generated_fed_files_to_their_end() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-files.toml");
        let mut config = load(&path);
        let dir = tempfile::tempdir().unwrap();
        let feds = config.evb.rus.concat();
        let fed_sim = swdaq_sim::fed::FedSimConfig {
            feds,
            ..config.evb.fed_sim(0)
        };
        swdaq_sim::fed::write_fed_files(fed_sim, 300, 1, dir.path()).unwrap();
        config.evb.input.directory = dir.path().to_owned();
        config.run.output_dir = dir.path().join("out");
        let (summary, _) = run(&config);
        assert_eq!(
            (summary.built(), summary.written(), summary.incomplete()),
            (300, 300, 0)
        );
    }

    /// The shipped UDP configuration on free ports, fed by the FED sender: every event the
    /// FEDs send is built, and the run ends at `max_events`.
    #[test]
    fn shipped_udp_config_builds_what_the_feds_send() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb-udp.toml");
        let mut config = load(&path);
        let dir = tempfile::tempdir().unwrap();
        let feds = config.evb.rus.concat();
        let base = loop {
            let first = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = first.local_addr().unwrap().port();
            let free = |k: usize| std::net::UdpSocket::bind(("127.0.0.1", port + k as u16));
            if port < 60_000 && (1..feds.len()).all(|k| free(k).is_ok()) {
                break first.local_addr().unwrap();
            }
        };
        config.evb.input.udp_address = Some(base);
        config.run.output_dir = dir.path().join("out");
        config.evb.max_events = Some(300);
        let fed_sim = swdaq_sim::fed::FedSimConfig {
            feds,
            ..config.evb.fed_sim(0)
        };
        let sender = std::thread::spawn(move || {
            // Send once every FED's port is bound (`/proc/net/udp`).
            let bound = |k: u16| {
                let local = format!("0100007F:{:04X}", base.port() + k);
                std::fs::read_to_string("/proc/net/udp")
                    .unwrap()
                    .lines()
                    .any(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while !(0..8).all(bound) {
                assert!(Instant::now() < deadline, "the run never bound its ports");
                std::thread::sleep(Duration::from_millis(10));
            }
            swdaq_evb::fed_udp::send(fed_sim, 300, base, true).unwrap()
        });
        let (summary, _) = run(&config);
        let sent = sender.join().unwrap();
        assert_eq!(sent.datagrams, 8 * 300);
        let dropped: u64 = summary.feds.iter().map(|f| f.2.ingest.kernel_dropped).sum();
        assert_eq!(
            (summary.built(), summary.written(), summary.incomplete()),
            (300, 300, 0)
        );
        let good: u64 = summary.feds.iter().map(|f| f.2.good).sum();
        assert_eq!(good + dropped, sent.datagrams);
    }

    #[test]
    fn shipped_example_config_loads_and_runs() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/evb.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(crate::models::select(&text).unwrap().name(), "evb");
        let mut config = load(&path);
        let dir = tempfile::tempdir().unwrap();
        config.run.output_dir = dir.path().to_owned();
        config.evb.max_events = Some(2000);
        config.evb.paced = false;
        config.run.metrics_addr = "127.0.0.1:0".into();
        let (summary, stop_reason) = run(&config);
        assert_eq!(
            (summary.built(), summary.written(), summary.lost()),
            (2000, 2000, 0)
        );
        assert_eq!(stop_reason, StopReason::InputEnded);
        let text = summary_text(&summary, &stop_reason);
        assert!(text.contains("(the input ended"), "{text}");
        assert!(text.contains("2000 built (0 incomplete)"), "{text}");
    }
}

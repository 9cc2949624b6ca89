//! The ATLAS-style SW ROD: emulated FELIX cards, a SW ROD thread per ROB aggregating e-link
//! chunks into ROB fragments, request servers, the HLT building full events (eformat v5) and
//! storing them in ATLAS EventStorage files, one sequence per luminosity block
//! (`swdaq_swrod::files`), in one process (`system`, `threads`) or as `swrod`, `hltsv` and
//! `hlt` applications (`apps`). The cards and ROBs (`cards`, `readout`) and the HLT with its
//! storage (`hlt`) are the same code either way. Its keys: `config`; its live figures:
//! `live`; what it counts and checks against the emulator's truth: `report`; its closing
//! summary: `summary`.

pub mod aggregation;
pub mod apps;
pub mod cards;
pub mod config;
mod hlt;
pub mod inputs;
pub mod live;
mod readout;
pub mod report;
mod sampler;
pub mod summary;
mod summary_apps;
pub mod system;
mod threads;
pub mod wire;

use crate::run_section::RunSection;
use crate::runtime::model::{Capabilities, Configured, Model, ModelOf, Outcome, RunHooks};
use crate::runtime::outcome::StopReason;
use crate::runtime::stop::StopRequest;
use crate::runtime::topology::TopologySection;
use crate::stored::{self, StoredEvent, StoredFragment};
use config::{SwrodInputKind, SwrodRunConfig};
use report::SwrodReport;
use std::path::PathBuf;
use swdaq_format::input_file::MappedFile;

pub static SWROD: ModelOf<SwrodRunConfig> = ModelOf::new(
    "swrod",
    "ATLAS-style SW ROD",
    Some("swrod"),
    config::parse,
    Some(&config::OLD_SPELLINGS),
)
.with_dashboard(include_str!("dashboard.json"))
.with_alerts(include_str!("alerts.json"));

impl Configured for SwrodRunConfig {
    fn model(&self) -> &'static dyn Model {
        &SWROD
    }

    fn run_section(&self) -> &RunSection {
        &self.run
    }

    fn run_section_mut(&mut self) -> &mut RunSection {
        &mut self.run
    }

    fn set_links(&mut self, n: u32) -> anyhow::Result<()> {
        self.swrod.felix.elinks = u16::try_from(n).map_err(|_| {
            anyhow::anyhow!("--links: {n} e-links per FELIX card do not fit swrod.felix.elinks")
        })?;
        Ok(())
    }

    fn validate(&self) -> anyhow::Result<()> {
        SwrodRunConfig::validate(self)
    }

    fn to_toml(&self) -> String {
        SwrodRunConfig::to_toml(self)
    }

    /// The output directory, and with applications each HLT application's inside it.
    fn output_dirs(&self) -> Vec<PathBuf> {
        let hlts = self.topology.of_kind(apps::HLT);
        std::iter::once(self.run.output_dir.clone())
            .chain(hlts.map(|(_, a)| apps::hlt_directory(self, &a.name)))
            .collect()
    }

    fn topology(&self) -> &TopologySection {
        &self.topology
    }

    fn describe(&self) -> String {
        let s = &self.swrod;
        let source = match s.input.kind {
            SwrodInputKind::Emulator if s.l1a_rate_hz > 0.0 => {
                format!("emulated, {} Hz L1A", s.l1a_rate_hz)
            }
            SwrodInputKind::Emulator => "emulated, L1As as fast as the chain takes them".into(),
            SwrodInputKind::File => format!("read from {}", s.input.directory.display()),
            SwrodInputKind::Tcp => format!(
                "from FELIX servers at {} (+ card)",
                s.input
                    .tcp_address
                    .map_or_else(|| "?".into(), |a| a.to_string())
            ),
        };
        format!(
            "{} FELIX cards in {} x {} e-links ({source}), {} ROBs per card{}, {}, storing 1 event in {} to {}{}",
            s.cards,
            s.felix.mode_words(),
            s.felix.elinks,
            s.robs_per_card,
            if self.is_distributed() {
                format!(" in {} applications", self.topology.apps.len())
            } else {
                String::new()
            },
            crate::runtime::model::duration_words(self.run.duration_s),
            s.hlt_accept_every,
            self.run.output_dir.display(),
            if self.run.metrics_addr.is_empty() || self.is_distributed() {
                String::new()
            } else {
                format!(", metrics on http://{}/metrics", self.run.metrics_addr)
            },
        )
    }

    fn steering(&self) -> Capabilities {
        Capabilities {
            pause_resume: Ok(()),
            trigger_change: Err(
                "the SW ROD has no trigger sources to change (its L1 accept rate is swrod.l1a_rate_hz)".into(),
            ),
            record: Err("the SW ROD has no raw bursts (they are the chain's)".into()),
        }
    }

    /// The last event of the newest EventStorage file (closed, or still `.writing`).
    fn stored_event(&self, run: u32) -> Result<StoredEvent, String> {
        stored::newest_event(
            &self.output_dirs(),
            run,
            &[".data", ".writing"],
            |file, _| {
                let mapped = MappedFile::open(file).map_err(|e| e.to_string())?;
                let name = file.file_name().unwrap_or_default().to_string_lossy();
                let event = swdaq_swrod::inspect::newest_event(&mapped, &name)?;
                Ok(event.map(|e| StoredEvent {
                    file: file.to_path_buf(),
                    event: e.l1_id.into(),
                    bytes: e.bytes as u64,
                    fragments: e
                        .rob_data
                        .iter()
                        .map(|&(rob, bytes)| StoredFragment {
                            source: format!("ROB 0x{rob:08x}"),
                            bytes: bytes as u64,
                        })
                        .collect(),
                    left_out: e
                        .missing_robs
                        .iter()
                        .map(|rob| format!("ROB 0x{rob:08x} missing (not collected)"))
                        .collect(),
                    picture: None,
                }))
            },
        )
    }

    fn run(&self, stop: &StopRequest, hooks: &dyn RunHooks) -> anyhow::Result<Box<dyn Outcome>> {
        let (report, stop_reason) = if self.is_distributed() {
            let exe = crate::runtime::launch::current_exe()?;
            system::run_apps(self, &exe, stop, hooks)?
        } else {
            system::run(self, stop, hooks)?
        };
        Ok(Box::new(SwrodOutcome {
            report,
            stop_reason,
        }))
    }
}

/// How a run of the SW ROD ended.
pub struct SwrodOutcome {
    pub report: SwrodReport,
    pub stop_reason: StopReason,
}

impl Outcome for SwrodOutcome {
    fn run_number(&self) -> u32 {
        self.report.run_number
    }

    fn stop_reason(&self) -> &StopReason {
        &self.stop_reason
    }

    fn text(&self) -> String {
        summary::summary_text(&self.report, &self.stop_reason)
    }

    fn model(&self) -> &'static str {
        SWROD.name()
    }

    fn figures(&self) -> serde_json::Value {
        summary::summary_json(&self.report)
    }

    fn failure(&self) -> Option<String> {
        if let Some(e) = &self.report.storage_error {
            return Some(format!("storage failed: {e}"));
        }
        // A card's file cut short: the L1 accepts after the cut are not in the run.
        let hltsv = self.report.apps.as_ref().and_then(|a| a.hltsv.as_ref());
        let cut: Vec<String> = (self.report.cards.iter())
            .filter_map(|c| Some(format!("card {}: {}", c.card, c.input_error.as_ref()?)))
            .chain(
                hltsv
                    .and_then(|h| h.ttc_input_error.as_ref())
                    .map(|e| format!("the HLT supervisor's card 0 TTC-to-host: {e}")),
            )
            .collect();
        (!cut.is_empty()).then(|| format!("input ended early ({})", cut.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::summary::{summary_json, summary_text};
    use super::*;
    use std::path::Path;

    #[test]
    fn a_sw_rod_topology_reads_every_card_once_with_one_supervisor() {
        use crate::runtime::topology::App;
        let at = |port: u16| format!("tcp://127.0.0.1:{port}");
        let swrod = |name: &str, port, cards: &[u16]| {
            App::new(name, apps::SWROD, at(port)).with("cards", cards.to_vec())
        };
        let topology = vec![
            swrod("swrod-0", 7300, &[0, 2]),
            swrod("swrod-1", 7301, &[1]),
            App::new("hltsv", apps::HLTSV, at(7302)),
            App::new("hlt-0", apps::HLT, at(7303)),
        ];
        let check = |apps: Vec<App>, cards: u16| {
            let mut config = SwrodRunConfig::default();
            config.swrod.cards = cards;
            config.topology.apps = apps;
            apps::check_topology(&config)
        };
        check(topology.clone(), 3).unwrap();
        let fails = |change: &dyn Fn(&mut Vec<App>), cards, expected: &str| {
            let mut t = topology.clone();
            change(&mut t);
            let e = check(t, cards).unwrap_err().to_string();
            assert!(e.contains(expected), "{e:?} should say {expected:?}");
        };
        let cards = |i: usize, cards: &'static [u16]| {
            move |t: &mut Vec<App>| {
                t[i] = t[i].clone().with("cards", cards);
            }
        };
        fails(&|_| {}, 4, "cards [3] are read out by no swrod");
        fails(&|_| {}, 2, "card 2 does not exist");
        fails(&cards(1, &[1, 2]), 3, "card 2 is read out twice");
        fails(&cards(2, &[2]), 3, "only swrod applications");
        fails(&|t| t[2].kind = apps::HLT.into(), 3, "0 hltsv applications");
        fails(&|t| t[3].kind = "bu".into(), 3, "do not belong");
    }

    /// The shipped applications' file: a valid SW ROD topology that the applications read
    /// back as the same configuration; a card read twice or by nobody is refused by name.
    #[test]
    fn shipped_applications_config_is_a_valid_sw_rod_topology() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/swrod-apps.toml");
        let config = config::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let kinds: Vec<&str> = config
            .topology
            .apps
            .iter()
            .map(|a| a.kind.as_str())
            .collect();
        use apps::{HLT, HLTSV, SWROD};
        assert_eq!(kinds, [SWROD, SWROD, HLTSV, HLT, HLT]);
        assert!(config.is_distributed());
        assert_eq!(config::parse(&config.to_toml()).unwrap(), config);
        let mut twice = config.clone();
        twice.topology.apps[1] = twice.topology.apps[1].clone().with("cards", vec![0]);
        let e = config::parse(&twice.to_toml()).unwrap_err().to_string();
        assert!(e.contains("card 0 is read out twice"), "{e}");
        let mut more = config.clone();
        more.swrod.cards = 3;
        let e = config::parse(&more.to_toml()).unwrap_err().to_string();
        assert!(
            e.contains("cards [2] are read out by no swrod application"),
            "{e}"
        );
        // Applications take FELIX servers (the supervisor reads card 0's TTC-to-host
        // e-link, so no L1A rate is needed), never files.
        let mut served = config.clone();
        served.swrod.input.kind = config::SwrodInputKind::Tcp;
        served.swrod.input.tcp_address = Some("127.0.0.1:4000".parse().unwrap());
        served.swrod.l1a_rate_hz = 0.0;
        config::parse(&served.to_toml()).unwrap();
        let mut files = config.clone();
        files.swrod.input.kind = config::SwrodInputKind::File;
        files.swrod.input.directory = "cards".into();
        let e = config::parse(&files.to_toml()).unwrap_err().to_string();
        assert!(e.contains("\"file\" runs in one process only"), "{e}");
    }

    /// The shipped example, paced and stopped by its duration (the stop path every
    /// interactive run takes), with faults on: truth and counters agree.
    #[test]
    fn shipped_example_config_runs_and_stops_on_time_with_faults_accounted() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/swrod.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(crate::models::select(&text).unwrap().name(), "swrod");
        let mut config = config::parse(&text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        config.run.output_dir = dir.path().to_owned();
        config.run.metrics_addr = "127.0.0.1:0".into();
        config.run.duration_s = 1.5;
        config.swrod.felix.faults.missing_chunk = 0.001;
        config.swrod.felix.faults.truncated_chunk = 0.001;
        let (report, stop_reason) = system::run(&config, &StopRequest::default(), &()).unwrap();
        assert_eq!(stop_reason, StopReason::Duration);
        assert!(report.truth_ok(), "{}", summary_text(&report, &stop_reason));
        assert!(report.cards[0].l1as > 0);
        assert!(report.seconds < 10.0, "the stop took {} s", report.seconds);
        assert_eq!(report.hlt.events, report.cards[0].l1as);
        let text = summary_text(&report, &stop_reason);
        assert!(text.contains("overall OK"), "{text}");
        assert_eq!(summary_json(&report)["truth"]["ok"], true);
    }
}

//! Every run on record (#38): the run registry consulted around a run of any model, the one
//! place `swdaq run` and `swdaq serve` claim a run number and write the run's row before
//! data taking ([`claim`]), and complete it at the stop ([`RecordedRun::finish`]). The
//! files a run closes are recorded as they close, by a [`FileRecorder`] the run owns; in a
//! topology, each `swdaq app` records its application's ([`record_app_files`]).

use crate::file_recorder::FileRecorder;
use crate::runtime::model::{Configured, Outcome};
use crate::transition_hooks::HookRun;
use swdaq_format::run_files::{self, RunClaimError};
use swdaq_registry::{Application, ClaimError, Registry, RunStart};

/// A run whose row is written and not yet completed, its files recorded as they close.
pub struct RecordedRun {
    registry: Registry,
    number: u32,
    files: FileRecorder,
}

/// A claimed run, with a line for each earlier run on this host left not ended.
pub struct Claimed {
    pub run: RecordedRun,
    pub not_ended: Vec<String>,
}

/// Opens `config`'s registry, names runs left not ended, claims the run number — in the
/// output directories (`claim_run`, after `at_least_after` and every run on record) and in
/// the registry — and writes the run's row, before anything is written.
pub fn claim(
    config: &dyn Configured,
    at_least_after: Option<u32>,
    operator: &str,
) -> Result<Claimed, ClaimError> {
    let section = config.run_section();
    let location = section
        .registry_location()
        .map_err(|e| ClaimError::Other(anyhow::anyhow!(e)))?;
    let mut registry = Registry::open(&location).map_err(ClaimError::Other)?;
    let host = host_name();
    let own = std::process::id();
    let not_ended = registry
        .notice_not_ended(&host, |pid| {
            pid != own && std::path::Path::new(&format!("/proc/{pid}")).exists()
        })
        .map_err(ClaimError::Other)?;
    let dirs = config.output_dirs();
    let dirs: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
    let requested = config.run_number();
    let start = RunStart {
        run_type: section.run_type.clone(),
        model: config.model().name().into(),
        operator: operator.into(),
        host: host.clone(),
        pid: own,
        applications: applications(config, &host),
        configuration: config.to_toml(),
        software: swdaq_registry::software::get(),
        started_at: std::time::SystemTime::now(),
    };
    let number = registry.claim(requested, &start, |on_record| {
        run_files::claim_run(&dirs, requested, at_least_after.max(on_record)).map_err(|e| match e {
            RunClaimError::Taken { .. } => ClaimError::Taken(e.to_string()),
            _ => ClaimError::Other(e.into()),
        })
    })?;
    Ok(Claimed {
        run: RecordedRun {
            registry,
            number,
            files: FileRecorder::start(location, number, "swdaq".into()),
        },
        not_ended,
    })
}

impl RecordedRun {
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Completes the row at the stop: the files this process closed not on record yet, the
    /// hooks that ran and what they printed, the stop reason and the summary (a run that
    /// failed or was refused: why).
    pub fn finish(
        mut self,
        ended: Result<&dyn Outcome, String>,
        hooks: &[HookRun],
    ) -> anyhow::Result<()> {
        self.files.finish(Some(&mut self.registry))?;
        let hooks: Vec<_> = hooks.iter().map(HookRun::for_registry).collect();
        self.registry.add_hooks(self.number, &hooks)?;
        match ended {
            Ok(outcome) => self.registry.end_run(
                self.number,
                &outcome.stop_reason().to_string(),
                &outcome.json(),
            ),
            Err(error) => self.registry.end_run(
                self.number,
                &format!("failed: {error}"),
                &serde_json::Value::Null,
            ),
        }
    }
}

/// `swdaq app`: records the files its application closes, in its run's row, as they close
/// (a topology's applications each write their own files; the launcher writes the row);
/// [`FileRecorder::finish`] at the application's end records the rest.
pub fn record_app_files(config: &dyn Configured, app: &str) -> anyhow::Result<FileRecorder> {
    let location = config
        .run_section()
        .registry_location()
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(FileRecorder::start(
        location,
        config.run_number(),
        format!("swdaq app {app}"),
    ))
}

/// Who runs this process: the OS user.
pub fn os_user() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        // SAFETY: getuid has no preconditions and cannot fail.
        .unwrap_or_else(|| format!("uid {}", unsafe { libc::getuid() }))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The topology's applications, or the model itself in this process.
fn applications(config: &dyn Configured, host: &str) -> Vec<Application> {
    let topology = config.topology();
    if !topology.is_distributed() {
        let model = config.model().name();
        return vec![Application {
            name: model.into(),
            kind: model.into(),
            host: host.into(),
        }];
    }
    topology
        .apps
        .iter()
        .map(|a| Application {
            name: a.name.clone(),
            kind: a.kind.clone(),
            host: if a.host.is_empty() {
                host.into()
            } else {
                a.host.clone()
            },
        })
        .collect()
}

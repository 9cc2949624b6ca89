//! `[run.transfer]`: copying each closed file of the run's registry to permanent storage
//! (`swdaq-transfer`) beside `swdaq run` and `swdaq serve` — the keys, their checks, and the
//! agent they start. The agent has its own thread, opens its own connection to the registry,
//! and sees a run's files once the run's stop has recorded them; nothing of the data taking
//! waits for it.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;
use swdaq_transfer::{Agent, Backoff, Destination, Settings};

/// How long a stop waits for the agent's thread (a running `xrdcp` is killed at once).
pub const STOP_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferSection {
    /// Where files go: `root://HOST:PORT//PATH` (an XRootD server, EOS) or an absolute
    /// directory (a mounted EOS or NFS area).
    pub destination: String,
    /// Delete a local file once its copy is verified at the destination (default: keep).
    #[serde(default)]
    pub delete_after_verify: bool,
    /// Seconds before a failed file is tried again, doubled after each further failure...
    #[serde(default = "default_retry_first_s")]
    pub retry_first_s: f64,
    /// ... up to this many.
    #[serde(default = "default_retry_max_s")]
    pub retry_max_s: f64,
    /// Seconds between looks at the registry for files to transfer.
    #[serde(default = "default_poll_s")]
    pub poll_s: f64,
    /// Seconds one file's copy may take; then it is killed and tried again later.
    #[serde(default = "default_copy_timeout_s")]
    pub copy_timeout_s: f64,
    /// Seconds a checksum query or a rename at the destination may take.
    #[serde(default = "default_query_timeout_s")]
    pub query_timeout_s: f64,
    /// `swdaq run`: seconds it keeps transferring after the run's stop, before it exits
    /// (what is left stays in the backlog, for `swdaq transfer` or the next run).
    #[serde(default = "default_wait_after_run_s")]
    pub wait_after_run_s: f64,
}

fn default_retry_first_s() -> f64 {
    5.0
}
fn default_retry_max_s() -> f64 {
    600.0
}
fn default_poll_s() -> f64 {
    2.0
}
fn default_copy_timeout_s() -> f64 {
    600.0
}
fn default_query_timeout_s() -> f64 {
    30.0
}
fn default_wait_after_run_s() -> f64 {
    30.0
}

impl TransferSection {
    /// Checks the keys before anything starts; an error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        Destination::parse(&self.destination)
            .map_err(|e| anyhow::anyhow!("invalid configuration: run.transfer.destination: {e}"))?;
        for (key, value, min) in [
            ("retry_first_s", self.retry_first_s, 0.01),
            ("retry_max_s", self.retry_max_s, self.retry_first_s),
            ("poll_s", self.poll_s, 0.01),
            ("copy_timeout_s", self.copy_timeout_s, 1.0),
            ("query_timeout_s", self.query_timeout_s, 1.0),
            ("wait_after_run_s", self.wait_after_run_s, 0.0),
        ] {
            anyhow::ensure!(
                value.is_finite() && value >= min && value <= 86_400.0,
                "invalid configuration: run.transfer.{key}: must be in [{min}, 86400] seconds"
            );
        }
        Ok(())
    }

    /// The transfer's settings, files kept at their place under `output_dir`.
    pub fn settings(&self, output_dir: &Path) -> anyhow::Result<Settings> {
        self.validate()?;
        let destination = Destination::parse(&self.destination).map_err(|e| anyhow::anyhow!(e))?;
        Ok(Settings {
            delete_after_verify: self.delete_after_verify,
            retry: Backoff {
                first: Duration::from_secs_f64(self.retry_first_s),
                max: Duration::from_secs_f64(self.retry_max_s),
            },
            poll: Duration::from_secs_f64(self.poll_s),
            copy_timeout: Duration::from_secs_f64(self.copy_timeout_s),
            query_timeout: Duration::from_secs_f64(self.query_timeout_s),
            output_dir: Some(output_dir.to_path_buf()),
            ..Settings::new(destination)
        })
    }
}

/// The agent `[run.transfer]` asks for beside a run (`None`: no such section), with its
/// series in `metrics` when given.
pub fn start_agent(
    run: &crate::run_section::RunSection,
    metrics: Option<&swdaq_monitor::Registry>,
) -> anyhow::Result<Option<Agent>> {
    let Some(section) = &run.transfer else {
        return Ok(None);
    };
    let settings = section.settings(&run.output_dir)?;
    let location = run.registry_location().map_err(|e| anyhow::anyhow!(e))?;
    let metrics = match metrics {
        Some(m) => Some(swdaq_transfer::Metrics::register(m, &settings.destination)?),
        None => None,
    };
    Ok(Some(Agent::start(settings, location, metrics)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> TransferSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn keys_default_and_are_checked_by_name() {
        let s = section("destination = \"root://eos.example:1094//eos/raw\"\n");
        s.validate().unwrap();
        assert!(!s.delete_after_verify, "kept by default");
        let settings = s.settings(Path::new("/data/out")).unwrap();
        assert_eq!(settings.retry.first, Duration::from_secs(5));
        assert_eq!(settings.output_dir.as_deref(), Some(Path::new("/data/out")));
        let e = section("destination = \"relative\"\n")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("run.transfer.destination"), "{e}");
        let e = section("destination = \"/mnt/eos\"\nretry_first_s = 10\nretry_max_s = 5\n")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("run.transfer.retry_max_s"), "{e}");
        assert!(
            toml::from_str::<TransferSection>("destination = \"/x\"\ndelete = true\n").is_err()
        );
    }
}

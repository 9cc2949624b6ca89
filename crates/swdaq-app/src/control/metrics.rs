//! `swdaq serve`'s own `/metrics` (behind the token like every data route): what Prometheus
//! needs to alert on that no run's `/metrics` can say, since a run serves its figures only
//! while it runs — run control's state (a run stopped on a fault is `error`), the last run's
//! number, the output disks' free space, and the requests refused by status code (wrong
//! tokens among them), and the transfer to permanent storage beside it (the series `swdaq
//! transfer --metrics-addr` serves). Rendered by `swdaq_monitor`'s exposition, as every run's.

use super::fsm::State;
use std::collections::BTreeMap;
use std::path::PathBuf;
use swdaq_monitor::{Family, MetricKind, ProcessHealth, Series, Snapshot, Value};

/// What the families are made of.
pub struct Observed<'a> {
    pub state: State,
    pub last_run_number: Option<u32>,
    /// (directory, bytes available, bytes in all) of each output directory's disk.
    pub disks: &'a [(PathBuf, u64, u64)],
    pub refused: &'a BTreeMap<u16, u64>,
    /// The transfer agent's families (`swdaq_transfer::Metrics`), none without one.
    pub transfer: Vec<Family>,
}

fn series(labels: &[(&str, String)], value: Value) -> Series {
    Series {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        value,
    }
}

fn gauge(v: f64) -> Value {
    Value::Gauge { value: v }
}

fn family(name: &str, help: &str, kind: MetricKind, series: Vec<Series>) -> Family {
    Family {
        name: name.into(),
        help: help.into(),
        kind,
        series,
    }
}

/// The Prometheus text of `observed`, with the process's resident memory.
pub fn render(observed: &Observed<'_>) -> String {
    let states = State::ALL
        .iter()
        .map(|s| {
            let on = if *s == observed.state { 1.0 } else { 0.0 };
            series(&[("state", s.name().into())], gauge(on))
        })
        .collect();
    let disk = |pick: fn(&(PathBuf, u64, u64)) -> u64| {
        observed
            .disks
            .iter()
            .map(|d| {
                series(
                    &[("directory", d.0.display().to_string())],
                    gauge(pick(d) as f64),
                )
            })
            .collect()
    };
    let refused = observed
        .refused
        .iter()
        .map(|(code, n)| {
            let value = Value::Counter {
                total: *n,
                delta: 0,
                rate_per_second: 0.0,
                idle_seconds: 0.0,
            };
            series(&[("code", code.to_string())], value)
        })
        .collect();
    let mut families = vec![
        family(
            "swdaq_control_state",
            "Run control's state: 1 for the state it is in, 0 for the others",
            MetricKind::Gauge,
            states,
        ),
        family(
            "swdaq_control_output_available_bytes",
            "Bytes available to swdaq on the disk of each output directory",
            MetricKind::Gauge,
            disk(|d| d.1),
        ),
        family(
            "swdaq_control_output_size_bytes",
            "Size of the disk of each output directory",
            MetricKind::Gauge,
            disk(|d| d.2),
        ),
        family(
            "swdaq_control_refused_requests_total",
            "Requests answered with an error, by status code (401: missing or wrong token)",
            MetricKind::Counter,
            refused,
        ),
    ];
    if let Some(n) = observed.last_run_number {
        families.push(family(
            "swdaq_control_last_run_number",
            "The number of the run going on or last started",
            MetricKind::Gauge,
            vec![series(&[], gauge(f64::from(n)))],
        ));
    }
    families.extend(observed.transfer.iter().cloned());
    swdaq_monitor::render_prometheus(&Snapshot {
        uptime_seconds: 0.0,
        interval_seconds: 0.0,
        families,
        process: ProcessHealth {
            resident_memory_bytes: swdaq_monitor::proc::resident_memory_bytes(),
            threads: Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_disks_and_refusals_are_exposed() {
        let refused = BTreeMap::from([(401, 3), (409, 1)]);
        let text = render(&Observed {
            state: State::Error,
            last_run_number: Some(12),
            disks: &[(PathBuf::from("/data"), 5, 100)],
            refused: &refused,
            transfer: Vec::new(),
        });
        for line in [
            "swdaq_control_state{state=\"error\"} 1.0",
            "swdaq_control_state{state=\"running\"} 0.0",
            "swdaq_control_output_available_bytes{directory=\"/data\"} 5.0",
            "swdaq_control_output_size_bytes{directory=\"/data\"} 100.0",
            "swdaq_control_refused_requests_total{code=\"401\"} 3",
            "swdaq_control_last_run_number 12.0",
            "# TYPE swdaq_control_refused_requests_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("swdaq_transfer_"), "no transfer, no series");
    }

    #[test]
    fn the_transfer_s_series_are_those_of_swdaq_transfer() {
        let registry = swdaq_monitor::Registry::new();
        let destination = swdaq_transfer::Destination::parse("/eos/raw").unwrap();
        let metrics = swdaq_transfer::Metrics::register(&registry, &destination).unwrap();
        metrics.backlog_files.set(3.0);
        metrics.verified.add(7);
        let transfer = swdaq_monitor::Collector::new(registry).collect().families;
        let text = render(&Observed {
            state: State::Running,
            last_run_number: None,
            disks: &[],
            refused: &BTreeMap::new(),
            transfer,
        });
        for line in [
            "swdaq_transfer_backlog_files{destination=\"/eos/raw\",thread=\"transfer\"} 3.0",
            "swdaq_transfer_verified_files_total{destination=\"/eos/raw\",thread=\"transfer\"} 7",
            "swdaq_control_state{state=\"running\"} 1.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}

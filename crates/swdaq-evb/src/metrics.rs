//! The event builder's counters in the monitoring registry. Loops keep plain counts and
//! publish the increments every [`PUBLISH_EVERY`] events (and at the end).

use crate::check::{FedCheckFailure, FedCounts};
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};

pub const PUBLISH_EVERY: u64 = 256;

/// Named counters published from plain counts.
pub struct CounterSet {
    counters: Vec<Counter>,
    published: Vec<u64>,
}

impl CounterSet {
    pub fn register(
        registry: &Registry,
        thread: &str,
        labels: &[(&str, &str)],
        names: &[(&str, &str)],
    ) -> Result<Self, MonitorError> {
        let mut block = registry.block(thread, labels);
        let counters = names
            .iter()
            .map(|(name, help)| block.counter(name, help))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            published: vec![0; counters.len()],
            counters,
        })
    }

    /// Adds what grew since the last call; `values` in the order of registration.
    pub fn publish(&mut self, values: &[u64]) {
        for ((counter, done), &now) in self.counters.iter().zip(&mut self.published).zip(values) {
            counter.add(now.saturating_sub(*done));
            *done = now;
        }
    }
}

/// Per-FED counters of a readout unit.
pub struct FedMetrics {
    per_fed: Vec<CounterSet>,
}

impl FedMetrics {
    pub fn register(
        registry: &Registry,
        thread: &str,
        ru: u16,
        feds: &[u16],
    ) -> Result<Self, MonitorError> {
        let names: Vec<(String, String)> = [
            (
                "swdaq_evb_fed_fragments_total".to_owned(),
                "FED fragments that passed every check".to_owned(),
            ),
            (
                "swdaq_evb_fed_bytes_total".to_owned(),
                "Bytes of FED fragments that passed".to_owned(),
            ),
        ]
        .into_iter()
        .chain(FedCheckFailure::ALL.iter().map(|f| {
            (
                format!("swdaq_evb_fed_{}_total", f.name()),
                format!("FED fragments that failed the check: {}", f.name()),
            )
        }))
        .chain(
            [
                ("received", "FED fragments the link took into its buffer"),
                ("received_bytes", "Bytes the link took into its buffer"),
                ("oversized", "FED fragments larger than a buffer slot"),
                ("truncated", "Reads that failed part-way, ending the link"),
                (
                    "too_short",
                    "Records too short to be a FED fragment (not landed)",
                ),
                (
                    "kernel_dropped",
                    "Datagrams the kernel dropped before the link read them (socket buffer full)",
                ),
                (
                    "decode_errors",
                    "What the FED's decoder could not make a fragment of",
                ),
                (
                    "ferol_signature",
                    "FEROL blocks of the FED without FEROL's signature (fragment lost)",
                ),
                (
                    "ferol_fed_id",
                    "FEROL blocks naming another FED than their fragment's (fragment lost)",
                ),
                (
                    "ferol_event_number",
                    "FEROL blocks whose event number is not their fragment's (fragment lost)",
                ),
                (
                    "ferol_packet_order",
                    "FEROL blocks out of order (fragment lost)",
                ),
                (
                    "ferol_length",
                    "FEROL blocks of impossible length, or fragments too long (fragment lost)",
                ),
                (
                    "stream_connections",
                    "Connections the FED's FEROL stream accepted",
                ),
                (
                    "stream_closed",
                    "Times the FED's FEROL stream was closed by its sender",
                ),
                (
                    "stream_cut",
                    "Closes of the FED's FEROL stream that cut a fragment short",
                ),
                (
                    "stream_stalled",
                    "Times the FED's FEROL stream stopped mid-fragment for longer than stop_wait",
                ),
            ]
            .map(|(name, help)| (format!("swdaq_evb_fed_{name}_total"), help.to_owned())),
        )
        .collect();
        let names: Vec<(&str, &str)> = names
            .iter()
            .map(|(n, h)| (n.as_str(), h.as_str()))
            .collect();
        let ru = ru.to_string();
        let per_fed = feds
            .iter()
            .map(|fed| {
                CounterSet::register(
                    registry,
                    thread,
                    &[("ru", &ru), ("fed", &fed.to_string())],
                    &names,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { per_fed })
    }

    pub fn publish(&mut self, counts: &[FedCounts]) {
        for (set, c) in self.per_fed.iter_mut().zip(counts) {
            let mut values = vec![c.good, c.bytes];
            values.extend_from_slice(&c.failures);
            let i = &c.ingest;
            values.extend([
                i.fragments,
                i.bytes,
                i.oversized,
                i.truncated,
                i.too_short,
                i.kernel_dropped,
                i.decode_errors,
                i.stream.signature,
                i.stream.fed_id,
                i.stream.event_number,
                i.stream.packet_order,
                i.stream.length,
                i.stream.connections,
                i.stream.closed,
                i.stream.cut,
                i.stream.stalled,
            ]);
            set.publish(&values);
        }
    }
}

/// A queue depth as a gauge.
pub fn queue_gauge(
    registry: &Registry,
    thread: &str,
    labels: &[(&str, &str)],
    name: &str,
    help: &str,
) -> Result<Gauge, MonitorError> {
    registry.block(thread, labels).gauge(name, help)
}

/// CPU time of the calling thread in ns (`CLOCK_THREAD_CPUTIME_ID`): the machine is shared,
/// so per-item costs are CPU time, not wall time. Not `/proc/thread-self/schedstat`: a
/// running thread's figure there moves only at scheduler ticks, so a short span read 0.
pub fn thread_cpu_ns() -> f64 {
    cpu_time::ThreadTime::now().as_duration().as_nanos() as f64
}

/// CPU ticks (USER_HZ) of the event builder's own threads (named `evb-*`): what the
/// per-core figures count; the farm stand-in's threads (`farm-*`) are apart.
pub fn builder_cpu_ticks() -> u64 {
    swdaq_monitor::proc::read_threads()
        .iter()
        .filter(|t| t.name.starts_with("evb-"))
        .map(|t| t.cpu_ticks)
        .sum()
}

/// One-minute load average (`/proc/loadavg`); NaN where it cannot be read.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

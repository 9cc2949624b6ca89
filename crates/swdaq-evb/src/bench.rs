//! Event-builder benchmark (library side of `swdaq bench evb`), everything measured in the
//! same run:
//! * the whole builder in one process, flat out (not paced) and, if asked, paced at a
//!   trigger rate: built events/s, GB/s written, CPU seconds of its threads (per-core rate =
//!   events per CPU second), lost and incomplete events;
//! * the bare in-process transport moving events of the same size between two threads;
//! * per-fragment costs (FED emulation, readout-unit checks with CRC-16, and both through
//!   the FED links' latency buffers as the readout units run them) and per-event costs
//!   (building with CRC32C, writing) on one core.

use crate::build::{BuiltEvent, EventBuilder};
use crate::check::SuperFragmentBuilder;
use crate::config::EvbConfig;
use crate::files::{FileWriter, WriterConfig};
use crate::metrics::{builder_cpu_ticks, thread_cpu_ns};
use crate::pause::TriggerClock;
use crate::producer::{Pacing, Producer};
use crate::system::{Drills, EvbError, EvbRun, EvbSummary};
use serde::Serialize;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use swdaq_monitor::Registry;
use swdaq_monitor::proc::USER_HZ;
use swdaq_sim::fed::{FedEmulator, FedEvent};

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    /// `flat out` or `paced`.
    pub mode: &'static str,
    pub trigger_rate_hz: Option<f64>,
    pub events: u64,
    pub seconds: f64,
    pub built_per_second: f64,
    pub written_gbps: f64,
    /// CPU seconds of the event builder's threads (resolution 10 ms per thread).
    pub cpu_seconds: f64,
    pub built_per_cpu_second: f64,
    pub incomplete: u64,
    pub lost: u64,
    /// Events the event manager held back for want of builder-unit credit.
    pub throttled: u64,
    /// Paced runs: the most an event was given out after its trigger time, in ms.
    pub max_behind_trigger_ms: f64,
    pub build_time_p50_us: u64,
    pub build_time_p99_us: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    pub fed_emulation_ns_per_fragment: f64,
    /// Checks (markers, length, source, L1 id, CRC-16) and the copy into the super-fragment.
    pub ru_check_ns_per_fragment: f64,
    /// The direct path, as readout units read before FED links: each event emulated into
    /// one reused buffer and checked from there into its super-fragment.
    pub direct_ns_per_fragment: f64,
    /// The readout units' path: emulation into each FED's latency buffer, placement by L1
    /// id, the same checks and copy into the super-fragment (`Producer`).
    pub fed_link_ns_per_fragment: f64,
    /// `fed_link_ns_per_fragment` over `direct_ns_per_fragment`, same run.
    pub fed_link_vs_direct: f64,
    pub crc16_gbps: f64,
    /// Assembly of the FRD event from its super-fragments, CRC32C included.
    pub bu_build_ns_per_event: f64,
    pub crc32c_gbps: f64,
    /// Writing built events to files (page cache / RAM disk), `.jsn` included.
    pub write_ns_per_event: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TransportRow {
    pub event_bytes: usize,
    pub events_per_second: f64,
    pub gbps: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub readout_units: usize,
    pub feds_per_ru: usize,
    pub fed_bytes: u32,
    pub builder_units: u16,
    pub mean_event_bytes: f64,
    pub runs: Vec<RunRow>,
    pub bare_transport: TransportRow,
    /// Flat-out built events/s over the bare transport's events/s, same run.
    pub evb_vs_bare_transport: f64,
    pub costs: CostRow,
}

/// Runs the event builder with `config` until it ends or `limit` passes, sampling the CPU
/// time of its threads just before they end (they vanish from /proc once joined).
fn measured_run(
    config: &EvbConfig,
    limit: Option<Duration>,
) -> Result<(EvbSummary, f64), EvbError> {
    let before = builder_cpu_ticks();
    let evb = EvbRun::start(config, &Registry::new(), &Drills::default(), None)?;
    let started = Instant::now();
    let mut ticks = before;
    while !evb.is_finished() {
        if limit.is_some_and(|l| started.elapsed() >= l) {
            evb.stop();
        }
        ticks = ticks.max(builder_cpu_ticks());
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = evb.join()?;
    Ok((summary, ticks.saturating_sub(before) as f64 / USER_HZ))
}

/// A run's row from its summary and the CPU seconds of its threads.
pub fn row(mode: &'static str, rate: Option<f64>, s: &EvbSummary, cpu_seconds: f64) -> RunRow {
    let seconds = s.elapsed.as_secs_f64();
    let built = s.built();
    RunRow {
        mode,
        trigger_rate_hz: rate,
        events: built,
        seconds,
        built_per_second: built as f64 / seconds,
        written_gbps: s.written_bytes() as f64 / seconds / 1e9,
        cpu_seconds,
        built_per_cpu_second: built as f64 / cpu_seconds.max(f64::MIN_POSITIVE),
        incomplete: s.incomplete(),
        lost: s.lost(),
        throttled: s.evm.throttled,
        max_behind_trigger_ms: s.evm.max_behind.as_secs_f64() * 1e3,
        build_time_p50_us: s.build_time_us(0.5),
        build_time_p99_us: s.build_time_us(0.99),
    }
}

/// Bare transport: events of `bytes` moved through the same kind of in-process channel
/// from one thread to another, each a fresh allocation as the builder's are.
fn bare_transport(bytes: usize, events: u64) -> TransportRow {
    let (tx, rx) = swdaq_dataflow::transport::local::<Vec<u8>>(256);
    let started = Instant::now();
    let consumer = std::thread::spawn(move || rx.iter().map(|v| v.len() as u64).sum::<u64>());
    for _ in 0..events {
        if tx.send(vec![0u8; bytes]).is_err() {
            break;
        }
    }
    drop(tx);
    let moved = consumer.join().unwrap_or(0);
    let seconds = started.elapsed().as_secs_f64();
    TransportRow {
        event_bytes: bytes,
        events_per_second: events as f64 / seconds,
        gbps: moved as f64 / seconds / 1e9,
    }
}

/// A stopwatch of this thread's CPU time.
struct CpuClock(f64);

impl CpuClock {
    fn start() -> Self {
        Self(thread_cpu_ns())
    }

    fn elapsed_ns(&self) -> f64 {
        thread_cpu_ns() - self.0
    }
}

fn costs(config: &EvbConfig, events: u64, dir: &Path) -> Result<CostRow, EvbError> {
    let emulator = || {
        FedEmulator::new(config.fed_sim(0))
            .map_err(|source| crate::config::EvbConfigError::Feds { ru: 0, source })
    };
    let feds = config.rus[0].len() as f64;
    let mut truth = Vec::new();
    // Into one reused event, as a readout unit emulates: fresh buffers would add their
    // allocation and first-touch page faults to the figure.
    let (mut timed, mut reused) = (emulator()?, FedEvent::default());
    let t = CpuClock::start();
    for _ in 0..events {
        timed.next_event(&mut reused, &mut truth);
        black_box(&reused);
    }
    let fed_emulation = t.elapsed_ns() / (events as f64 * feds);
    // The same events again, kept for the stages below.
    let mut untimed = emulator()?;
    let generated: Vec<FedEvent> = (0..events)
        .map(|_| {
            let mut e = FedEvent::default();
            untimed.next_event(&mut e, &mut truth);
            e
        })
        .collect();

    let ids = config.rus[0].iter().map(|f| f.id).collect();
    let mut checker = SuperFragmentBuilder::new(0, ids);
    let t = CpuClock::start();
    let parts: Vec<_> = generated.iter().map(|e| checker.build(e)).collect();
    let ru_check = t.elapsed_ns() / (events as f64 * feds);
    // Both paths emulate and check each event at once (cache-hot), unlike the stages above.
    let (mut emulated, mut event) = (emulator()?, FedEvent::default());
    let t = CpuClock::start();
    for _ in 0..events {
        emulated.next_event(&mut event, &mut truth);
        black_box(checker.build(&event));
    }
    let direct = t.elapsed_ns() / (events as f64 * feds);
    let mut producer = Producer::new(
        0,
        config.fed_sim(0),
        TriggerClock::new(Instant::now()),
        Pacing::FlatOut,
    )
    .map_err(|source| EvbError::Input {
        ru: 0,
        source: source.into(),
    })?;
    let t = CpuClock::start();
    for _ in 0..events {
        black_box(producer.take());
    }
    let fed_link = t.elapsed_ns() / (events as f64 * feds);
    let fed_bytes: usize = generated.iter().map(|e| e.bytes.len()).sum();
    let t = CpuClock::start();
    for e in &generated {
        black_box(swdaq_format::fed::fed_crc16(black_box(&e.bytes)));
    }
    let crc16_gbps = fed_bytes as f64 / (t.elapsed_ns() / 1e9) / 1e9;

    // Every readout unit's part is the event manager's here: same sizes, no second emulation.
    let rus = config.rus.len();
    let mut builder = EventBuilder::new(config.run, rus, Duration::from_secs(3600));
    let inputs: Vec<_> = parts
        .iter()
        .map(|p| {
            (0..rus as u16)
                .map(|ru| crate::message::SuperFragment { ru, ..p.clone() })
                .collect::<Vec<_>>()
        })
        .collect();
    let now = Instant::now();
    let t = CpuClock::start();
    let mut built: Vec<BuiltEvent> = Vec::with_capacity(events as usize);
    for (i, mut event_parts) in inputs.into_iter().enumerate() {
        let event = i as u64 + 1;
        let first = event_parts.remove(0);
        let mut done = builder.start(event, 1, first, now);
        for p in event_parts {
            done = done.or(builder.add(event, p, now));
        }
        built.extend(done);
    }
    let bu_build = t.elapsed_ns() / events as f64;
    let event_bytes: usize = built.iter().map(BuiltEvent::size).sum();
    let t = CpuClock::start();
    for b in &built {
        black_box(swdaq_format::crc::crc32c_iov(black_box(b).pieces()));
    }
    let crc32c_gbps = event_bytes as f64 / (t.elapsed_ns() / 1e9) / 1e9;

    let mut writer = FileWriter::new(WriterConfig {
        directory: dir.to_owned(),
        run: config.run,
        events_per_file: config.events_per_file,
        min_free_bytes: 0,
        disk_full: config.disk_full,
        source: "bench".into(),
        provenance: None,
    })?;
    let t = CpuClock::start();
    for b in built {
        writer.write(b)?;
    }
    writer.finish(None).map_err(|(e, _)| e)?;
    let write = t.elapsed_ns() / events as f64;
    Ok(CostRow {
        fed_emulation_ns_per_fragment: fed_emulation,
        ru_check_ns_per_fragment: ru_check,
        direct_ns_per_fragment: direct,
        fed_link_ns_per_fragment: fed_link,
        fed_link_vs_direct: fed_link / direct,
        crc16_gbps,
        bu_build_ns_per_event: bu_build,
        crc32c_gbps,
        write_ns_per_event: write,
    })
}

/// `config` describes the system (its `paced`, `max_events` and `output` are set here);
/// `paced` adds a run at `config.trigger_rate_hz` for that long. Files go under `dir`, which
/// is emptied between runs.
pub fn run(
    config: &EvbConfig,
    events: u64,
    paced: Option<Duration>,
    dir: &Path,
) -> Result<BenchResult, EvbError> {
    let clear = || {
        let _ = std::fs::remove_dir_all(dir);
    };
    let mut runs = Vec::new();
    clear();
    let flat = EvbConfig {
        paced: false,
        max_events: Some(events),
        output: dir.join("flat"),
        ..config.clone()
    };
    let (summary, cpu) = measured_run(&flat, None)?;
    let mean_event_bytes = summary.written_bytes() as f64 / summary.written().max(1) as f64;
    runs.push(row("flat out", None, &summary, cpu));
    clear();
    if let Some(seconds) = paced {
        let paced_cfg = EvbConfig {
            paced: true,
            max_events: None,
            output: dir.join("paced"),
            ..config.clone()
        };
        let (summary, cpu) = measured_run(&paced_cfg, Some(seconds))?;
        runs.push(row("paced", Some(config.trigger_rate_hz), &summary, cpu));
        clear();
    }
    let bare = bare_transport(mean_event_bytes as usize, events);
    let costs = costs(config, events.min(20_000), &dir.join("costs"))?;
    clear();
    Ok(BenchResult {
        readout_units: config.rus.len(),
        feds_per_ru: config.rus[0].len(),
        fed_bytes: config.rus[0][0].mean_bytes,
        builder_units: config.builder_units,
        mean_event_bytes,
        evb_vs_bare_transport: runs[0].built_per_second / bare.events_per_second,
        runs,
        bare_transport: bare,
        costs,
    })
}

//! Raw recording in `swdaq run`, supernova-burst style (`[recording]`): on a command
//! (`swdaq ctl record`) or on a decision of a configured trigger type, every link's whole
//! latency buffer and the next `seconds_after` of data time go to raw files, one per link, in
//! `<directory>/runNNNNNN_burstKKK/linkL.swraw`: the layout `swdaq run`'s file source reads,
//! so `[source] kind = "file"` with `directory` set to a burst replays it.
//!
//! Each link of a burst records on a thread of its own (`rawrec-L`, see
//! `swdaq_readout::record`: it never holds the link's producer up). A request while
//! `max_concurrent` bursts are in progress is refused and counted: each burst stays the fixed
//! window its request asked for, and a request after it ends still finds the last
//! `readout.buffer_s` of data in the buffers.
//!
//! Why a trigger *type*: a decision already says why the trigger fired (its type bits), so
//! any maker, including a future supernova-candidate maker, asks for a recording without a
//! new message; the decision is still built into a record as usual.

use super::config::{RecordingSection, RunConfig};
use crate::runtime::steering::{
    BurstReason, BurstRequests, BurstStarted, RecordError, check_seconds,
};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use swdaq_dataflow::transport::{Disconnected, Outbox};
use swdaq_format::rawfile::{RawFileHeader, link_path};
use swdaq_monitor::{Counter, Gauge, MonitorError, Registry};
use swdaq_readout::link::LinkShared;
use swdaq_readout::record::RecorderMetrics;
use swdaq_readout::record::{LinkBurst, record_burst};
use swdaq_trigger::{TriggerDecision, trigger_type};

/// How often a recording thread looks for new frames.
const RECORDER_POLL: Duration = Duration::from_millis(2);

/// One link's part of a burst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkBurstOutcome {
    pub link: u32,
    pub burst: Option<LinkBurst>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BurstReport {
    pub burst: u32,
    pub reason: BurstReason,
    pub directory: PathBuf,
    pub seconds_after: f64,
    pub links: Vec<LinkBurstOutcome>,
}

impl BurstReport {
    fn bursts(&self) -> impl Iterator<Item = &LinkBurst> {
        self.links.iter().filter_map(|l| l.burst.as_ref())
    }

    /// Bytes written per CPU second of the recording threads (copy and file write).
    pub fn bytes_per_cpu_second(&self) -> f64 {
        let bytes: u64 = self.bursts().map(|b| b.counts.bytes_written).sum();
        let cpu: f64 = self.bursts().map(|b| b.cpu_seconds).sum();
        if cpu > 0.0 { bytes as f64 / cpu } else { 0.0 }
    }

    /// How fast the buffers were written out: the bytes every link wrote until it caught up
    /// with its producer, over the slowest link's time to get there (after that the burst
    /// goes at the links' data rate). `None` if a link never caught up.
    pub fn buffer_write_bytes_per_s(&self) -> Option<f64> {
        let mut seconds: f64 = 0.0;
        let mut bytes = 0;
        for b in self.bursts() {
            seconds = seconds.max(b.catch_up_seconds?);
            bytes += b.catch_up_bytes;
        }
        (seconds > 0.0).then(|| bytes as f64 / seconds)
    }
}

/// The run's recordings, for the summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordingReport {
    pub bursts: Vec<BurstReport>,
    /// Requests refused because `max_concurrent` bursts were in progress.
    pub refused: u64,
}

impl RecordingReport {
    /// Adds another readout application's recordings: its part of a burst (same number,
    /// same directory) joins that burst's links.
    pub fn add(&mut self, other: RecordingReport) {
        for burst in other.bursts {
            match self
                .bursts
                .iter_mut()
                .find(|b| b.burst == burst.burst && b.directory == burst.directory)
            {
                Some(b) => b.links.extend(burst.links),
                None => self.bursts.push(burst),
            }
        }
        self.bursts.sort_by_key(|b| b.burst);
        self.refused += other.refused;
    }

    /// The summary's lines.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let all = || self.bursts.iter().flat_map(|b| b.bursts());
        let _ = writeln!(
            s,
            "Recording {} bursts: {} frames, {:.2} GB written, {} frames lost by the recorder; {} requests refused (bursts in progress)",
            self.bursts.len(),
            all().map(|b| b.counts.frames_written).sum::<u64>(),
            all().map(|b| b.counts.bytes_written).sum::<u64>() as f64 / 1e9,
            all().map(|b| b.counts.frames_lost).sum::<u64>(),
            self.refused,
        );
        for b in &self.bursts {
            let lag = all_lag_frames(b);
            let _ = writeln!(
                s,
                "  burst {} ({}): {}; buffers written out at {}, then max recorder lag {lag} frames; {:.2} GB per CPU second{}",
                b.burst,
                match &b.reason {
                    BurstReason::Command => "command".to_string(),
                    BurstReason::Trigger { number, types } =>
                        format!("trigger {number}, {}", types.join("+")),
                },
                b.directory.display(),
                b.buffer_write_bytes_per_s().map_or(
                    "- (a link never caught up)".into(),
                    |r| format!("{:.2} GB/s", r / 1e9)
                ),
                b.bytes_per_cpu_second() / 1e9,
                if b.bursts().any(|l| l.cut_short) {
                    "; cut short by the run's end"
                } else {
                    ""
                },
            );
            for l in &b.links {
                if let Some(e) = &l.error {
                    let _ = writeln!(s, "    link {}: failed: {e}", l.link);
                }
                if let Some(burst) = l.burst.as_ref().filter(|b| b.counts.frames_lost > 0) {
                    let c = &burst.counts;
                    let gaps: Vec<String> = c
                        .gaps
                        .iter()
                        .map(|g| match g.after_timestamp {
                            Some(ts) => format!("{} after {ts}", g.frames),
                            None => format!("{} before the first frame", g.frames),
                        })
                        .collect();
                    let _ = writeln!(
                        s,
                        "    link {}: {} frames lost in gaps: {}{}",
                        l.link,
                        c.frames_lost,
                        gaps.join(", "),
                        if c.gaps_unnamed > 0 {
                            format!(" and {} more gaps", c.gaps_unnamed)
                        } else {
                            String::new()
                        },
                    );
                }
            }
        }
        s
    }
}

fn all_lag_frames(b: &BurstReport) -> u64 {
    b.bursts()
        .map(|l| l.counts.max_lag_frames)
        .max()
        .unwrap_or(0)
}

struct Running {
    report: BurstReport,
    threads: Vec<(u32, JoinHandle<std::io::Result<LinkBurst>>)>,
}

impl Running {
    fn finished(&self) -> bool {
        self.threads.iter().all(|(_, t)| t.is_finished())
    }

    fn join(mut self) -> BurstReport {
        for (link, thread) in self.threads {
            let (burst, error) = match thread.join() {
                Ok(Ok(b)) => (Some(b), None),
                Ok(Err(e)) => (None, Some(e.to_string())),
                Err(_) => (None, Some("the recording thread panicked".into())),
            };
            self.report
                .links
                .push(LinkBurstOutcome { link, burst, error });
        }
        self.report
    }
}

struct Bursts {
    next: u32,
    running: Vec<Running>,
    ended: Vec<BurstReport>,
    refused: u64,
    started_total: Counter,
    refused_total: Counter,
    in_progress: Gauge,
}

impl Bursts {
    /// Collects the bursts that have ended.
    fn reap(&mut self) {
        let (done, running) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(Running::finished);
        self.running = running;
        self.ended.extend(done.into_iter().map(Running::join));
        self.in_progress.set(self.running.len() as f64);
    }
}

/// The bursts of one process's links.
pub struct Recordings {
    config: RecordingSection,
    directory: PathBuf,
    run_number: u32,
    links: Vec<(u32, Arc<LinkShared>)>,
    registry: Registry,
    stop: Arc<AtomicBool>,
    bursts: Mutex<Bursts>,
}

impl Recordings {
    /// The recordings of `links` (link number, buffer); `None` when `[recording]` is off.
    pub fn start(
        config: &RunConfig,
        links: Vec<(u32, Arc<LinkShared>)>,
        registry: &Registry,
    ) -> Result<Option<Arc<Self>>, MonitorError> {
        if !config.recording.enabled {
            return Ok(None);
        }
        let mut block = registry.block("recording", &[]);
        let bursts = Bursts {
            next: 1,
            running: Vec::new(),
            ended: Vec::new(),
            refused: 0,
            started_total: block.counter("swdaq_recording_bursts_total", "Bursts started")?,
            refused_total: block.counter(
                "swdaq_recording_refused_total",
                "Burst requests refused while recording.max_concurrent bursts were in progress",
            )?,
            in_progress: block
                .gauge("swdaq_recording_bursts_in_progress", "Bursts being written")?,
        };
        Ok(Some(Arc::new(Self {
            directory: config.recording.directory(&config.run.output_dir),
            config: config.recording.clone(),
            run_number: config.run.number,
            links,
            registry: registry.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            bursts: Mutex::new(bursts),
        })))
    }

    /// Stops the bursts in progress (each file closed with what it has) and reports all.
    pub fn finish(&self) -> RecordingReport {
        self.stop.store(true, Ordering::Release);
        let mut bursts = self.bursts.lock().unwrap_or_else(|e| e.into_inner());
        let running = std::mem::take(&mut bursts.running);
        bursts.ended.extend(running.into_iter().map(Running::join));
        bursts.ended.sort_by_key(|b| b.burst);
        RecordingReport {
            bursts: std::mem::take(&mut bursts.ended),
            refused: bursts.refused,
        }
    }

    /// A `record` command from the launcher: a refusal is said on stderr (and counted).
    pub fn on_command(recordings: Option<&Self>, seconds_after: f64, app: &str) {
        let result = match recordings {
            Some(r) => r.record(seconds_after, BurstReason::Command).map(drop),
            None => Err(RecordError::Disabled),
        };
        if let Err(e) = result {
            eprintln!("swdaq app {app}: no burst recorded: {e}");
        }
    }

    /// Records a burst of one link on a thread of its own.
    fn spawn_link(
        &self,
        link: u32,
        shared: &Arc<LinkShared>,
        path: PathBuf,
        seconds_after: f64,
    ) -> std::io::Result<JoinHandle<std::io::Result<LinkBurst>>> {
        let name = format!("rawrec-{link}");
        let metrics = RecorderMetrics::register(&self.registry, &name, link)
            .map_err(std::io::Error::other)?;
        let format = shared.format;
        let header = RawFileHeader {
            frame_type: format.fragment_type(),
            frame_size: format.frame_size() as u32,
            source_id: shared.source_id,
            run_number: self.run_number,
            first_timestamp: 0,
            created_unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        let ticks = (seconds_after * format.clock_hz()).round() as u64;
        let (shared, stop) = (Arc::clone(shared), Arc::clone(&self.stop));
        std::thread::Builder::new().name(name).spawn(move || {
            record_burst(
                &shared,
                &path,
                &header,
                ticks,
                &stop,
                RECORDER_POLL,
                Some(metrics),
            )
        })
    }
}

/// A run that ends without [`Recordings::finish`] (it failed) still stops its bursts.
impl Drop for Recordings {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl BurstRequests for Recordings {
    fn record(&self, seconds_after: f64, reason: BurstReason) -> Result<BurstStarted, RecordError> {
        check_seconds(seconds_after)?;
        let mut bursts = self.bursts.lock().unwrap_or_else(|e| e.into_inner());
        bursts.reap();
        if bursts.running.len() >= self.config.max_concurrent as usize {
            bursts.refused += 1;
            bursts.refused_total.inc();
            return Err(RecordError::Busy(bursts.running.len() as u32));
        }
        let burst = bursts.next;
        let directory = self
            .directory
            .join(format!("run{:06}_burst{burst:03}", self.run_number));
        std::fs::create_dir_all(&directory).map_err(|e| RecordError::Io(directory.clone(), e))?;
        bursts.next += 1;
        let mut running = Running {
            report: BurstReport {
                burst,
                reason,
                directory: directory.clone(),
                seconds_after,
                links: Vec::new(),
            },
            threads: Vec::new(),
        };
        for (link, shared) in &self.links {
            let path = link_path(&directory, *link);
            match self.spawn_link(*link, shared, path, seconds_after) {
                Ok(thread) => running.threads.push((*link, thread)),
                Err(e) => running.report.links.push(LinkBurstOutcome {
                    link: *link,
                    burst: None,
                    error: Some(format!("cannot start its recording thread: {e}")),
                }),
            }
        }
        eprintln!(
            "swdaq: recording burst {burst} ({} links, the latency buffer and {seconds_after} s after) to {}",
            self.links.len(),
            directory.display()
        );
        bursts.started_total.inc();
        bursts.running.push(running);
        bursts.in_progress.set(bursts.running.len() as f64);
        Ok(BurstStarted {
            burst: Some(burst),
            directory: Some(directory),
            seconds_after,
        })
    }
}

/// The trigger's decisions on their way to the builder: one that carries a configured trigger
/// type also starts a burst (a refusal is counted by [`Recordings`], the decision goes on).
pub struct RecordOnTrigger<O> {
    decisions: O,
    recordings: Option<Arc<Recordings>>,
    mask: u64,
}

impl<O> RecordOnTrigger<O> {
    pub fn new(decisions: O, recordings: Option<&Arc<Recordings>>) -> Self {
        let mask = recordings.map_or(0, |r| r.config.trigger_mask());
        Self {
            decisions,
            recordings: recordings.filter(|_| mask != 0).cloned(),
            mask,
        }
    }
}

impl<O: Outbox<TriggerDecision>> Outbox<TriggerDecision> for RecordOnTrigger<O> {
    fn send(&self, decision: TriggerDecision) -> Result<(), Disconnected> {
        if let Some(r) = &self.recordings
            && decision.trigger_type & self.mask != 0
        {
            let reason = BurstReason::Trigger {
                number: decision.trigger_number,
                types: trigger_type::names(decision.trigger_type & self.mask)
                    .into_iter()
                    .map(String::from)
                    .collect(),
            };
            let _ = r.record(r.config.seconds_after, reason);
        }
        self.decisions.send(decision)
    }
}

#[cfg(test)]
#[path = "recording_tests.rs"]
mod tests;

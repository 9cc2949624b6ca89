//! The tally as applications: each `counter` counts as in one process and tells the next
//! counter (in topology order, the last telling the first) its count every
//! [`TELL_EVERY`], and its final count when stopped; it reports what it counted and the
//! last count it heard from the one before it.

use super::config::TallyConfig;
use super::counter::count;
use super::wire::TallyMessage;
use crate::runtime::app::{AppContext, KindSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_net::Inlet;

/// A counter (every application of the tally is one).
pub const COUNTER: &str = "counter";

pub const KINDS: &[KindSpec<TallyConfig, CounterReport>] = &[KindSpec {
    name: COUNTER,
    fields: &[],
    count: |_| (1, 64),
    run,
}];

impl crate::runtime::model::Applications for TallyConfig {
    type Report = CounterReport;
    type Message = TallyMessage;
    const KINDS: &'static [KindSpec<Self, Self::Report>] = KINDS;
}

/// How often a counter tells the next its count.
const TELL_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CounterReport {
    pub counted: u64,
    /// The last count heard from the counter before it, and whether it was the final one.
    pub heard: u64,
    pub heard_final: bool,
    /// Counts the next counter did not take (its queue full, or it gone).
    pub untold: u64,
    pub refused_messages: BTreeMap<String, u64>,
    pub seconds: f64,
    pub thread_cpu: Vec<(String, f64)>,
}

fn run(ctx: &AppContext<TallyConfig>) -> anyhow::Result<CounterReport> {
    let counters = ctx.ids_of(COUNTER);
    let me = counters.iter().position(|&id| id == ctx.me).unwrap_or(0);
    let next = counters[(me + 1) % counters.len()];
    let monitoring = ctx.monitoring()?;
    let mut inlet = ctx.bind_inbox::<TallyMessage>()?;
    let outlet = ctx.outlet_to::<TallyMessage>(next)?;
    let _heartbeat = ctx.connect_and_heartbeat(vec![outlet.clone()])?;
    let (clock, started) = ctx.ready()?;
    let mut report = CounterReport::default();
    if started {
        let mut told_at = Instant::now();
        report.counted = count(
            &ctx.spec.name,
            ctx.config.tally.rate_hz,
            &ctx.commands.stop_flag(),
            &monitoring.registry,
            |counted| {
                listen(&mut inlet, &mut report, Duration::ZERO);
                if told_at.elapsed() >= TELL_EVERY {
                    told_at = Instant::now();
                    let told = outlet.send(&TallyMessage::Count {
                        counted,
                        last: false,
                    });
                    report.untold += u64::from(told.is_err());
                }
            },
        )?;
        let last = TallyMessage::Count {
            counted: report.counted,
            last: true,
        };
        if let Err(e) = outlet.send(&last) {
            eprintln!(
                "swdaq app {}: the final count was not sent: {e}",
                ctx.spec.name
            );
        }
        // Every counter is stopped at once: the one before says its final count soon.
        let deadline = Instant::now() + ctx.peer_timeout();
        while !report.heard_final && Instant::now() < deadline {
            listen(&mut inlet, &mut report, Duration::from_millis(20));
        }
    }
    report.refused_messages = inlet.counts().refused.clone();
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

/// Takes one count from the counter before, waiting up to `wait`.
fn listen(inlet: &mut Inlet<TallyMessage>, report: &mut CounterReport, wait: Duration) {
    if let Some(d) = inlet.receive(wait) {
        let TallyMessage::Count { counted, last } = d.message;
        report.heard = counted;
        report.heard_final = last;
    }
}

//! The `hltsv` application, ATLAS's HLT supervisor with the central trigger's L1 accepts:
//! it takes L1 accepts from the L1A clock at the run's rate, or from card 0's TTC-to-host
//! e-link when FELIX servers publish the cards (`l1a_source`), and gives each, numbered from
//! 1 and with the L1 ID every card gives it, to an HLT application with credit, round robin
//! (`swdaq_dataflow::credit`, as the event builder's event manager gives events to builder
//! units). With no credit anywhere the trigger is busy: the source stands still until an HLT
//! application asks for more (dead time, counted). Run control's pause holds it too. Every
//! `swrod` application hears how far its emulated cards may run: the L1 accepts given so far
//! and a lead (the L1A horizon), so a pause, a busy HLT farm or this application's death
//! hold the cards, as the central trigger's busy holds the front ends; the last word at the
//! end of the run is where the cards may stop. An HLT application that goes silent (or does
//! not take what it asked for) is gone: the events it had not settled are lost, by number.

use super::l1a_source::{L1aSource, Next};
use super::{NET_WAKE, SwrodAppReport, SwrodContext};
use crate::models::swrod::config::SwrodSettings;
use crate::models::swrod::report::HltsvReport;
use crate::models::swrod::wire::SwrodMessage;
use crate::runtime::stdio::{self as control, Command};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_dataflow::credit::Credits;
use swdaq_monitor::{Counter, MonitorError, Registry};
use swdaq_net::{Inlet, Liveness, Outlet, WireMessage};
use swdaq_swrod::message::{MAX_BATCH, ToHlt};
use swdaq_swrod::trigger::L1Accept;
use swdaq_trigger::TriggerControl;

/// Most L1 accepts given out before the inbox is looked at again.
const MOST_AT_ONCE: u64 = 4096;

pub(super) fn run(ctx: &SwrodContext) -> anyhow::Result<SwrodAppReport> {
    let s = &ctx.config.swrod;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let hlts = ctx.ids_of(super::HLT);
    let to_hlts = ctx.outlets_to(&hlts)?;
    let to_swrods = ctx.outlets_to(&ctx.ids_of(super::SWROD))?;
    let mut everyone = to_hlts.clone();
    everyone.extend(to_swrods.iter().cloned());
    let _heartbeat = ctx.connect_and_heartbeat(everyone)?;
    let metrics = Metrics::register(&monitoring.registry)?;
    let source = L1aSource::new(s, || ctx.commands.stop_requested())?;
    let (clock, started) = ctx.ready()?;
    let mut report = SwrodAppReport::default();
    if !started {
        return Ok(report);
    }
    let mut supervisor = Supervisor {
        s,
        credits: Credits::new(hlts.len()),
        liveness: Liveness::new(hlts.iter().copied(), ctx.peer_timeout()),
        batches: vec![Vec::new(); hlts.len()],
        hlts,
        to_hlts,
        to_swrods,
        source,
        busy_since: None,
        started: Instant::now(),
        horizon_sent: s.l1a_lead(),
        report: HltsvReport::default(),
        undelivered: BTreeMap::new(),
        metrics,
    };
    let inlet = supervisor.run(inlet, ctx);
    let mut hltsv = supervisor.report;
    hltsv.accounts = supervisor.credits.accounts().to_vec();
    hltsv.ttc_intake = supervisor.source.intake();
    hltsv.ttc_input_error = supervisor.source.ended_early();
    report.hltsv = Some(hltsv);
    report.undelivered = supervisor.undelivered;
    report.refused_messages = inlet.counts().refused.clone();
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

struct Metrics {
    given: Counter,
    lost: Counter,
    busy_us: Counter,
}

impl Metrics {
    fn register(registry: &Registry) -> Result<Self, MonitorError> {
        let mut b = registry.block("hltsv", &[]);
        Ok(Self {
            given: b.counter(
                "swdaq_swrod_l1as_given_total",
                "L1 accepts the HLT supervisor gave to HLT applications",
            )?,
            lost: b.counter(
                "swdaq_swrod_lost_events_total",
                "Events given to HLT applications that died before settling them",
            )?,
            busy_us: b.counter(
                "swdaq_swrod_trigger_busy_microseconds_total",
                "Microseconds the L1 accepts waited for an HLT application with room",
            )?,
        })
    }
}

struct Supervisor<'a> {
    s: &'a SwrodSettings,
    credits: Credits,
    liveness: Liveness,
    hlts: Vec<u32>,
    to_hlts: Vec<Outlet<SwrodMessage>>,
    to_swrods: Vec<Outlet<SwrodMessage>>,
    batches: Vec<Vec<L1Accept>>,
    /// When the run's L1 accepts began (luminosity blocks by time count from it).
    started: Instant,
    source: L1aSource,
    busy_since: Option<Instant>,
    horizon_sent: u64,
    report: HltsvReport,
    undelivered: BTreeMap<String, u64>,
    metrics: Metrics,
}

impl Supervisor<'_> {
    /// Gives out L1 accepts until the launcher's `stop`, then tells every HLT application
    /// the run has ended; returns the inbox (its counts are the report's).
    fn run(&mut self, mut inlet: Inlet<SwrodMessage>, ctx: &SwrodContext) -> Inlet<SwrodMessage> {
        let commands = ctx.commands.receiver();
        let max = if self.s.max_l1as > 0 {
            self.s.max_l1as
        } else {
            u64::MAX
        };
        let mut paused = false;
        let mut said_ended = false;
        let mut input_ended = false;
        let mut wait = Duration::ZERO;
        while !ctx.commands.stop_requested() {
            for command in commands.try_iter() {
                match command {
                    Command::TriggerControl(TriggerControl::Pause) => {
                        paused = true;
                        let now = Instant::now();
                        self.end_busy(now);
                        self.source.hold(now);
                    }
                    Command::TriggerControl(TriggerControl::Resume) => {
                        paused = false;
                        self.source.release(Instant::now());
                    }
                    other => eprintln!("swdaq: hltsv: ignored {other:?}"),
                }
            }
            self.take_requests(&mut inlet, wait);
            let given_out = if paused || input_ended || self.report.l1as >= max {
                Some(NET_WAKE)
            } else {
                self.give_out(max)
            };
            input_ended |= given_out.is_none();
            wait = given_out.unwrap_or(NET_WAKE);
            if (input_ended || self.report.l1as >= max) && !said_ended {
                said_ended = true;
                if let Err(e) = control::say_input_ended() {
                    eprintln!("swdaq: hltsv: cannot tell the launcher the L1 accepts ended: {e}");
                }
            }
        }
        self.flush();
        // The last word: the `swrod` applications' cards end no sooner than this.
        self.send_horizon();
        for (h, to) in self.to_hlts.iter().enumerate() {
            if self.credits.accounts()[h].alive
                && to.try_send(&SwrodMessage::ToHlt(ToHlt::EndOfRun)).is_err()
            {
                *self.undelivered.entry("end_of_run".into()).or_default() += 1;
            }
        }
        inlet
    }

    /// Takes the HLT applications' requests (the first waited for up to `wait`) and
    /// declares silent ones gone.
    fn take_requests(&mut self, inlet: &mut Inlet<SwrodMessage>, mut wait: Duration) {
        while let Some(d) = inlet.receive(wait) {
            wait = Duration::ZERO;
            match (d.message, self.hlts.iter().position(|&h| h == d.sender)) {
                (SwrodMessage::HltRequest(r), Some(h)) => {
                    self.credits.grant(h, u64::from(r.count), &r.settled);
                }
                (other, _) => eprintln!(
                    "swdaq: hltsv: ignored an unexpected {} from application {}",
                    other.kind(),
                    d.sender
                ),
            }
        }
        for app in self
            .liveness
            .newly_gone(|p| inlet.last_seen(p), Instant::now())
        {
            let h = self
                .hlts
                .iter()
                .position(|&a| a == app)
                .expect("watching HLTs only");
            eprintln!("swdaq: hltsv: HLT application {h} is gone; its unsettled events are lost");
            self.hlt_gone(h);
        }
    }

    /// Gives out the L1 accepts that are due to HLT applications with credit; how long to
    /// wait before looking again, or `None` when the source has ended.
    fn give_out(&mut self, max: u64) -> Option<Duration> {
        let now = Instant::now();
        if self.busy_since.is_some() && self.credits.any_credit() {
            self.end_busy(now);
            self.source.release(now);
        }
        let mut given = 0;
        let mut wait = NET_WAKE;
        let mut ended = false;
        while self.report.l1as < max && given < MOST_AT_ONCE {
            let index = self.report.l1as;
            let l1a = match self.source.next(index, now, self.s, self.started) {
                Next::Due(l1a) => l1a,
                Next::Wait(w) => {
                    wait = w;
                    break;
                }
                Next::Ended => {
                    ended = true;
                    break;
                }
            };
            let Some(h) = self.credits.take(index + 1) else {
                // Busy: no HLT application has room. The source stands still until one has.
                self.source.hold(now);
                self.busy_since.get_or_insert(now);
                break;
            };
            self.source.taken();
            self.batches[h].push(l1a);
            self.report.l1as += 1;
            given += 1;
            if self.batches[h].len() >= MAX_BATCH {
                self.send_batch(h);
            }
        }
        self.flush();
        self.metrics.given.add(given);
        if ended {
            return None;
        }
        Some(if self.busy_since.is_some() {
            NET_WAKE
        } else if given == MOST_AT_ONCE {
            Duration::ZERO
        } else {
            wait.min(NET_WAKE)
        })
    }

    /// The trigger is no longer busy (an HLT application has room, or run control paused).
    fn end_busy(&mut self, now: Instant) {
        if let Some(since) = self.busy_since.take() {
            let busy = now - since;
            self.report.busy_s += busy.as_secs_f64();
            self.metrics.busy_us.add(busy.as_micros() as u64);
        }
    }

    fn flush(&mut self) {
        for h in 0..self.batches.len() {
            if !self.batches[h].is_empty() {
                self.send_batch(h);
            }
        }
        if self.report.l1as + self.s.l1a_lead()
            >= self.horizon_sent + (self.s.l1a_lead() / 8).max(1)
        {
            self.send_horizon();
        }
    }

    /// Tells every `swrod` application the L1 accepts given so far and the lead.
    fn send_horizon(&mut self) {
        let horizon = self.report.l1as + self.s.l1a_lead();
        self.horizon_sent = horizon;
        for to in &self.to_swrods {
            // A `swrod` application that missed one hears the next.
            if to
                .try_send(&SwrodMessage::L1aHorizon { l1as: horizon })
                .is_err()
            {
                *self.undelivered.entry("l1a_horizon".into()).or_default() += 1;
            }
        }
    }

    fn send_batch(&mut self, h: usize) {
        let batch = std::mem::take(&mut self.batches[h]);
        // An HLT application is sent only what it asked for: a full queue means it is gone.
        if self.to_hlts[h]
            .try_send(&SwrodMessage::ToHlt(ToHlt::Assigned(batch)))
            .is_err()
        {
            eprintln!("swdaq: hltsv: HLT application {h} does not take its events: gone");
            self.hlt_gone(h);
        }
    }

    fn hlt_gone(&mut self, h: usize) {
        if self.credits.accounts()[h].alive {
            self.report.gone.push(h as u16);
            let lost = self.credits.died(h);
            self.metrics.lost.add(lost.len() as u64);
            self.report.lost.insert(h as u16, lost);
        }
    }
}

//! A `swrod` application: its FELIX cards, one SW ROD thread per ROB and the ROBs' request
//! servers, as in one process, the servers reached over the network (`rob_server`). The
//! cards follow the L1A clock by themselves, never past the HLT supervisor's horizon; at the
//! launcher's `stop` they end at a common L1 accept count a little ahead (fault-free for the
//! last `clean_tail_l1as`), each SW ROD thread flushes its open fragments, and the servers
//! answer until the end.

use super::rob_server::{Requests, answer_queues, send_answers};
use super::{SwrodAppReport, SwrodContext, cards_of, robs_of};
use crate::models::swrod::cards::Shared;
use crate::models::swrod::readout::Readout;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

pub(super) fn run(ctx: &SwrodContext) -> anyhow::Result<SwrodAppReport> {
    let s = &ctx.config.swrod;
    let monitoring = ctx.monitoring()?;
    let inlet = ctx.bind_inbox()?;
    let hlts = ctx.ids_of(super::HLT);
    let (hltsv, _) = ctx.config.topology.single(super::HLTSV);
    let to_hlts = ctx.outlets_to(&hlts)?;
    let _heartbeat = ctx.connect_and_heartbeat(to_hlts.clone())?;
    // The horizon starts at the lead: the cards need not wait for the supervisor's first word.
    let horizon = Arc::new(AtomicU64::new(s.l1a_lead()));
    let horizon_now = Arc::clone(&horizon);
    let shared = Shared::new(s, Arc::new(AtomicBool::new(false)), Arc::clone(&horizon));
    let cards = cards_of(&ctx.spec)?;
    let (readout, ports) = Readout::new(s, ctx.config.run.number, &cards, &monitoring.registry)?;
    let source_ids = robs_of(&ctx.config, &cards);
    let (clock, started) = ctx.ready()?;
    let mut report = SwrodAppReport::default();
    if !started {
        return Ok(report);
    }
    let started = Instant::now();
    let queues = answer_queues(hlts.len(), ports.len());
    let (senders, receivers): (Vec<Vec<_>>, Vec<Vec<_>>) = queues
        .into_iter()
        .map(|per_rob| per_rob.into_iter().unzip())
        .unzip();
    let requests = Requests {
        inlet,
        ports,
        hlts,
        hltsv,
        horizon,
        peer_timeout: ctx.peer_timeout(),
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let running = readout.spawn(scope, &shared, s, None)?;
        let requests = std::thread::Builder::new()
            .name("rob-requests".into())
            .spawn_scoped(scope, || requests.run(senders, &done))?;
        let to_hlts = &to_hlts;
        let source_ids = &source_ids;
        let answers = std::thread::Builder::new()
            .name("rob-answers".into())
            .spawn_scoped(scope, move || {
                send_answers(receivers, source_ids, to_hlts, ctx.peer_timeout())
            })?;
        while !ctx
            .commands
            .wait_for_stop(std::time::Duration::from_millis(100))
        {}
        // The supervisor's last horizon has every L1 accept it gave out: the cards reach it.
        shared.stop_at_least(
            s,
            horizon_now
                .load(Ordering::Relaxed)
                .saturating_sub(s.l1a_lead()),
        );
        let (readout, seconds) =
            running.join(s, started, || done.store(true, Ordering::Release))?;
        let failed = |what: &str| anyhow::anyhow!("the {what} thread panicked");
        let (refused, foreign) = requests.join().map_err(|_| failed("request"))?;
        let undelivered = answers.join().map_err(|_| failed("answer"))?;
        report.cards = readout
            .cards
            .into_iter()
            .map(|mut c| {
                let faults = std::mem::take(&mut c.faults);
                (c, faults)
            })
            .collect();
        report.readout_seconds = seconds;
        report.truth_unknown = !readout.truth_known;
        report.robs = readout.robs;
        report.requests = readout.requests;
        report.samples = readout.samples;
        report.sample_errors = readout.sample_errors;
        report.refused_messages = refused;
        report.undelivered = BTreeMap::from([
            ("rob_answers".to_string(), undelivered),
            ("requests_for_foreign_robs".to_string(), foreign),
        ]);
        Ok(())
    })?;
    (report.seconds, report.thread_cpu) = ctx.finish(&clock, monitoring);
    Ok(report)
}

//! The SW ROD's applications' reports in one `SwrodReport`, as one process would have
//! filled it, with what only applications have (`AppsPart`): how each ended, what their
//! inboxes refused, and the events lost by number — an HLT application declared gone, or
//! that ended without a report, is settled with what it left in its directory, so each event
//! the supervisor gave out is built by one HLT application or lost, exactly.

use super::HLT;
use super::{SwrodAppReport, hlt_directory};
use crate::models::swrod::config::SwrodRunConfig;
use crate::models::swrod::report::{AppsPart, HltsvReport, SwrodReport};
use crate::runtime::launch::Launched;
use std::collections::BTreeSet;
use swdaq_dataflow::credit::settle_with_disk;
use swdaq_swrod::read_back::{LeftOnDisk, read_back};

/// Incomplete events named in the summary, at most (as in one process).
const INCOMPLETE_EXAMPLES: usize = crate::models::swrod::hlt::INCOMPLETE_EXAMPLES;

pub(in crate::models::swrod) fn merge(launched: Launched, config: &SwrodRunConfig) -> SwrodReport {
    let s = &config.swrod;
    let hlt_names: Vec<&str> = config
        .topology
        .of_kind(HLT)
        .map(|(_, a)| a.name.as_str())
        .collect();
    let mut report = SwrodReport {
        run_number: config.run.number,
        seconds: launched.seconds,
        settings: s.clone(),
        cards: Vec::new(),
        // Until a `swrod` application says its generator's truth was not found.
        truth_known: true,
        robs: Vec::new(),
        requests: Vec::new(),
        hlt: Default::default(),
        hlt_cpu_s: 0.0,
        incomplete_examples: Vec::new(),
        samples: 0,
        sample_errors: 0,
        stored_events: 0,
        stored_flagged_events: 0,
        stored_bytes: 0,
        unwritten_events: 0,
        files: Vec::new(),
        storage_error: None,
        l1as_to_hlt: 0,
        apps: None,
        dqm: None,
    };
    let mut part = AppsPart::default();
    let mut reported = vec![false; hlt_names.len()];
    let mut robs = Vec::new();
    for (_, mut outcome, bytes) in launched.apps {
        match bytes.map(|b| postcard::from_bytes::<SwrodAppReport>(&b)) {
            Some(Ok(r)) => {
                if let Some(h) = hlt_names.iter().position(|&n| n == outcome.name) {
                    reported[h] = r.hlt.is_some();
                }
                robs.extend(r.robs.iter().cloned().zip(r.requests.iter().copied()));
                if let Some(p) = r.hlt.as_ref().and_then(|h| h.events_published) {
                    part.events_published.insert(outcome.name.clone(), p);
                }
                absorb(&mut report, &mut part, r);
            }
            Some(Err(e)) => {
                outcome.failure = Some(format!("report: not a SW ROD report: {e}"));
            }
            None => {}
        }
        part.apps.push(outcome);
    }
    report.cards.sort_by_key(|c| c.card);
    robs.sort_by_key(|(rob, _)| rob.source_id);
    (report.robs, report.requests) = robs.into_iter().unzip();
    report.incomplete_examples.truncate(INCOMPLETE_EXAMPLES);
    if let Some(hltsv) = part.hltsv.clone() {
        report.l1as_to_hlt = hltsv.l1as;
        settle(&mut report, &mut part, hltsv, &reported, |h| {
            read_back(&hlt_directory(config, hlt_names[h]), config.run.number)
                .map_err(|e| e.to_string())
        });
    }
    report.apps = Some(part);
    report
}

/// Adds one application's report.
fn absorb(report: &mut SwrodReport, part: &mut AppsPart, r: SwrodAppReport) {
    report
        .cards
        .extend(r.cards.into_iter().map(|(mut card, faults)| {
            card.faults = faults;
            card
        }));
    report.truth_known &= !r.truth_unknown;
    report.samples += r.samples;
    report.sample_errors += r.sample_errors;
    if let Some(h) = r.hlt {
        report.hlt.add(&h.counts);
        report.hlt_cpu_s += h.cpu_s;
        report.incomplete_examples.extend(h.incomplete_examples);
        report.stored_events += h.stored_events;
        report.stored_flagged_events += h.stored_flagged_events;
        report.stored_bytes += h.stored_bytes;
        report.unwritten_events += h.unwritten_events;
        report.files.extend(h.files);
        if report.storage_error.is_none() {
            report.storage_error = h.storage_error;
        }
    }
    if r.hltsv.is_some() {
        part.hltsv = r.hltsv;
    }
    for (reason, n) in r.refused_messages {
        *part.refused_messages.entry(reason).or_default() += n;
    }
    for (what, n) in r.undelivered {
        *part.undelivered.entry(what).or_default() += n;
    }
    part.thread_cpu.extend(r.thread_cpu);
}

/// Makes the lost events exact with what the HLT applications the supervisor declared gone,
/// or that ended without a report, left on disk (`read(h)`): what they stored counts as
/// stored, what they built counts as built, the rest is lost by number.
fn settle(
    report: &mut SwrodReport,
    part: &mut AppsPart,
    hltsv: HltsvReport,
    reported: &[bool],
    read: impl FnMut(usize) -> Result<LeftOnDisk, String>,
) {
    let gone: Vec<usize> = hltsv.gone.iter().map(|&h| usize::from(h)).collect();
    let mut lost: BTreeSet<u64> = hltsv.lost.values().flatten().copied().collect();
    part.read_back = settle_with_disk(&mut lost, &hltsv.accounts, &gone, reported, read, |l| {
        &l.events
    });
    for r in &part.read_back {
        let account = &hltsv.accounts[r.unit];
        // What this HLT application may have lost: its unsettled events at its end.
        let bound: BTreeSet<u64> = match hltsv.lost.get(&(r.unit as u16)) {
            Some(l) => l.iter().copied().collect(),
            None => account.unsettled.clone(),
        };
        let lost_here = bound.intersection(&lost).count() as u64;
        if !r.reported {
            part.events_of_unreported_hlts += account.assigned - lost_here;
            if let Ok(left) = &r.left {
                report.stored_events += left.events.len() as u64;
                report.stored_bytes += left.bytes;
            }
        }
    }
    part.lost_events = lost.into_iter().collect();
}

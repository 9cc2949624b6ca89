//! Record building: complete, timed-out, data-missing, late and duplicate cases, and the node
//! loop's credit flow with a sink that falls behind.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use swdaq_dataflow::nodes::{BuilderPorts, run_builder};
use swdaq_dataflow::transport::local;
use swdaq_dataflow::{
    BuildOutcome, BuilderConfig, RecordBuilder, RecordDone, RecordSink, SinkError,
};
use swdaq_format::fragment::fragment_error;
use swdaq_format::trigger_record::record_status;
use swdaq_format::{Fragment, FragmentType, SourceId, TriggerRecord};
use swdaq_readout::request::{DataRequest, RequestStatus, header};
use swdaq_readout::server::{DataResponse, Outcome};
use swdaq_trigger::{ReadoutWindow, TriggerDecision};

const TIMEOUT: Duration = Duration::from_millis(50);

fn builder() -> RecordBuilder {
    RecordBuilder::new(BuilderConfig {
        run_number: 7,
        timeout: TIMEOUT,
        element: 0,
    })
}

fn decision(n: u64, sources: &[u32]) -> TriggerDecision {
    TriggerDecision {
        trigger_number: n,
        timestamp: 1000 * n,
        trigger_type: 4,
        candidates: 1,
        windows: sources
            .iter()
            .map(|&s| ReadoutWindow {
                source: SourceId::readout(s),
                begin: 1000 * n - 10,
                end: 1000 * n + 20,
            })
            .collect(),
    }
}

fn fragment(req: &DataRequest, error_bits: u32, payload: &[u8]) -> Vec<u8> {
    Fragment::assemble(
        header(req, FragmentType::WIBETH, error_bits),
        std::iter::once(payload),
    )
}

#[test]
fn a_record_holds_one_fragment_per_requested_source_and_the_decision_in_its_header() {
    let mut b = builder();
    let reqs = b.start(decision(3, &[1, 2]), Instant::now());
    assert_eq!(reqs.len(), 2);
    assert_eq!((reqs[0].window_begin, reqs[0].window_end), (2990, 3020));
    assert_eq!(reqs[0].run_number, 7);
    assert!(
        b.on_fragment(3, reqs[1].source, fragment(&reqs[1], 0, b"bb"))
            .is_none()
    );
    let built = b
        .on_fragment(3, reqs[0].source, fragment(&reqs[0], 0, b"a"))
        .expect("last fragment");
    assert_eq!(built.outcome, BuildOutcome::Complete);
    let h = &built.record.header;
    assert_eq!(
        (h.trigger_number, h.trigger_timestamp, h.trigger_type),
        (3, 3000, 4)
    );
    assert_eq!(h.status_bits, 0);
    assert_eq!(h.components.len(), 2);
    assert_eq!(h.components[1].component, SourceId::readout(2));
    let payloads: Vec<Vec<u8>> = built
        .record
        .fragments()
        .map(|f| f.unwrap().payload.to_vec())
        .collect();
    assert_eq!(payloads, [b"a".to_vec(), b"bb".to_vec()], "in window order");
}

#[test]
fn a_record_missing_a_fragment_at_the_time_out_is_incomplete_and_names_the_source() {
    let mut b = builder();
    let t0 = Instant::now();
    let reqs = b.start(decision(1, &[1, 2]), t0);
    assert!(
        b.on_fragment(1, reqs[0].source, fragment(&reqs[0], 0, b"a"))
            .is_none()
    );
    assert!(b.expire(t0 + TIMEOUT / 2).is_empty());
    let built = b.expire(t0 + TIMEOUT).pop().expect("timed out");
    assert_eq!(built.outcome, BuildOutcome::TimedOut);
    assert_eq!(built.missing, [SourceId::readout(2)]);
    assert_eq!(built.record.header.status_bits, record_status::INCOMPLETE);
    assert_eq!(built.record.fragments.len(), 1);
    assert!(
        b.on_fragment(1, reqs[1].source, fragment(&reqs[1], 0, b"b"))
            .is_none()
    );
    assert_eq!(b.counts.late_fragments, 1);
    assert_eq!(b.counts.missing_by_source[&SourceId::readout(2)], 1);
}

#[test]
fn a_source_that_cannot_be_asked_is_given_up_at_once_not_at_the_time_out() {
    let mut b = builder();
    let reqs = b.start(decision(1, &[1, 2, 3]), Instant::now());
    assert!(b.unreachable(1, reqs[1].source).is_none());
    assert!(b.unreachable(1, reqs[1].source).is_none(), "given up once");
    assert!(
        b.on_fragment(1, reqs[0].source, fragment(&reqs[0], 0, b"a"))
            .is_none()
    );
    let built = b
        .on_fragment(1, reqs[2].source, fragment(&reqs[2], 0, b"c"))
        .expect("finished with the last answer, before any time-out");
    assert_eq!(built.outcome, BuildOutcome::TimedOut);
    assert_eq!(built.missing, [SourceId::readout(2)]);
    assert_eq!(built.record.header.status_bits, record_status::INCOMPLETE);
    assert_eq!(built.record.fragments.len(), 2);
    // A fragment from the given-up source after all is late, never a second record.
    assert!(
        b.on_fragment(1, reqs[1].source, fragment(&reqs[1], 0, b"b"))
            .is_none()
    );
    assert_eq!(b.counts.late_fragments, 1);
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn a_fragment_flagged_as_lacking_data_makes_the_record_incomplete() {
    let mut b = builder();
    let reqs = b.start(decision(1, &[5]), Instant::now());
    let bits = fragment_error::DATA_NOT_FOUND | fragment_error::TIMED_OUT;
    let built = b
        .on_fragment(1, reqs[0].source, fragment(&reqs[0], bits, b""))
        .unwrap();
    assert_eq!(built.outcome, BuildOutcome::DataMissing);
    assert_eq!(built.lacking_data, [SourceId::readout(5)]);
    assert_eq!(built.record.header.status_bits, record_status::INCOMPLETE);
}

#[test]
fn duplicate_decisions_and_unexpected_fragments_are_counted_and_ignored() {
    let mut b = builder();
    let reqs = b.start(decision(1, &[1]), Instant::now());
    assert!(b.start(decision(1, &[1]), Instant::now()).is_empty());
    assert!(
        b.on_fragment(1, SourceId::readout(9), fragment(&reqs[0], 0, b""))
            .is_none()
    );
    assert!(
        b.on_fragment(1, reqs[0].source, fragment(&reqs[0], 0, b""))
            .is_some()
    );
    assert!(
        b.start(decision(1, &[1]), Instant::now()).is_empty(),
        "already built"
    );
    assert_eq!(b.counts.duplicate_decisions, 2);
    assert_eq!(b.counts.unexpected_fragments, 1);
    assert_eq!(b.in_flight(), 0);
}

/// Takes a record only every other offer, as a disk that keeps falling behind.
struct SlowSink {
    offers: u64,
    stored: Vec<TriggerRecord>,
}

impl RecordSink for SlowSink {
    fn offer(&mut self, record: TriggerRecord) -> Result<(), SinkError> {
        self.offers += 1;
        if self.offers % 2 == 1 {
            return Err(SinkError::Full(record));
        }
        self.stored.push(record);
        Ok(())
    }
}

#[test]
fn the_node_answers_every_decision_with_a_record_and_returns_one_credit_per_stored_record() {
    let (decision_tx, decision_rx) = local::<TriggerDecision>(16);
    let (request_tx, request_rx) = local::<DataRequest>(64);
    let (response_tx, response_rx) = local::<DataResponse>(64);
    let (credit_tx, credit_rx) = local::<RecordDone>(64);
    // A stand-in request server: answers every request for source 1; source 2 never answers.
    let server = std::thread::spawn(move || {
        for req in request_rx {
            if req.source == SourceId::readout(2) {
                continue;
            }
            let response = DataResponse {
                request: req,
                fragment: fragment(&req, 0, b"data"),
                outcome: Outcome::Served(RequestStatus::Complete),
                latency: Duration::ZERO,
            };
            if response_tx.send(response).is_err() {
                break;
            }
        }
    });
    for n in 1..=5 {
        let sources: &[u32] = if n == 4 { &[1, 2] } else { &[1] };
        decision_tx.send(decision(n, sources)).unwrap();
    }
    drop(decision_tx);
    let routes: HashMap<_, _> = [1, 2]
        .map(|s| (SourceId::readout(s), request_tx.clone()))
        .into();
    drop(request_tx);
    let mut sink = SlowSink {
        offers: 0,
        stored: Vec::new(),
    };
    let mut incomplete = Vec::new();
    let report = run_builder(
        builder(),
        BuilderPorts {
            decisions: decision_rx,
            routes,
            responses: response_rx,
            credits: credit_tx,
        },
        &mut sink,
        Duration::from_millis(1),
        Duration::from_secs(5),
        |built| {
            if built.outcome != BuildOutcome::Complete {
                incomplete.push((built.record.header.trigger_number, built.missing.clone()));
            }
        },
    );
    server.join().unwrap();
    let mut numbers: Vec<u64> = sink
        .stored
        .iter()
        .map(|r| r.header.trigger_number)
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3, 4, 5], "exactly one record per decision");
    assert_eq!(incomplete, [(4, vec![SourceId::readout(2)])]);
    assert_eq!((report.stored, report.not_stored), (5, 0));
    let mut done: Vec<u64> = credit_rx.try_iter().map(|d| d.trigger_number).collect();
    done.sort_unstable();
    assert_eq!(
        done,
        [1, 2, 3, 4, 5],
        "one credit back per record, naming it"
    );
    assert_eq!(report.latencies.len(), 5);
}

//! A stop always ends the trigger node, even when its open decision's data never comes (links
//! fell silent, or garbage was taken for timestamps).

use std::time::{Duration, Instant};
use swdaq_dataflow::nodes::{TriggerInput, run_trigger};
use swdaq_dataflow::transport::local;
use swdaq_format::SourceId;
use swdaq_trigger::{TpBatch, Trigger, TriggerConfig};

const CLOCK_HZ: f64 = 62.5e6;

fn horizon(link: usize, horizon: u64) -> TriggerInput {
    TriggerInput::Tps(TpBatch {
        link,
        tps: Vec::new(),
        horizon,
        released_at: Instant::now(),
    })
}

#[test]
fn a_stop_ends_the_trigger_within_the_drain_wait_when_the_data_never_passes_the_window() {
    let config = TriggerConfig::default();
    assert!(
        config.periodic.enabled,
        "the periodic trigger opens the decision"
    );
    let trigger = Trigger::new(
        config,
        CLOCK_HZ,
        2,
        vec![SourceId::readout(0), SourceId::readout(1)],
        10,
        Instant::now(),
    )
    .unwrap();
    let (tx, rx) = local::<TriggerInput>(64);
    let (decision_tx, decision_rx) = local(64);
    // The periodic trigger starts one period after the data: its first candidate opens a
    // decision, and the links then go silent before the end of its window.
    for link in 0..2 {
        tx.send(horizon(link, 1)).unwrap();
    }
    for link in 0..2 {
        tx.send(horizon(link, CLOCK_HZ as u64 + 10)).unwrap();
    }
    tx.send(TriggerInput::Stop).unwrap();
    let drain_wait = Duration::from_millis(300);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let report = run_trigger(
            trigger,
            2,
            rx,
            decision_tx,
            Duration::from_millis(5),
            drain_wait,
            |_, _| {},
        );
        let _ = done_tx.send(report);
    });
    let report = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the trigger never ended after its stop");
    let took = started.elapsed();
    assert!(took >= drain_wait, "it waited for the data first: {took:?}");
    assert!(took < drain_wait * 5, "{took:?}");
    assert_eq!(report.counts.issued, 1, "the open decision still goes out");
    assert_eq!(decision_rx.try_iter().count(), 1);
    drop(tx);
}

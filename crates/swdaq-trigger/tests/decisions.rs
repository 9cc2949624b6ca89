//! The trigger end to end on hand-made TP streams: windows, merging, inhibit, determinism.

use proptest::prelude::*;
use std::time::{Duration, Instant};
use swdaq_format::{SourceId, TriggerPrimitive};
use swdaq_trigger::config::{ActivityConfig, PeriodicConfig, RandomConfig, TrackConfig};
use swdaq_trigger::{
    InhibitPolicy, TpBatch, Trigger, TriggerChange, TriggerConfig, TriggerControl, TriggerDecision,
    trigger_type,
};

/// WIBEth data time: 62.5 MHz.
const CLOCK_HZ: f64 = 62.5e6;
const AFTER: u64 = 1_000;

fn config(inhibit: InhibitPolicy) -> TriggerConfig {
    TriggerConfig {
        window_before_ticks: 100,
        window_after_ticks: AFTER,
        late_link_wait_ms: 60_000,
        inhibit,
        max_held_decisions: 2,
        multiplicity: ActivityConfig {
            enabled: true,
            group_channels: 1000,
            window_ticks: 50,
            threshold: 3,
            prescale: 1,
        },
        adc_sum: off(ActivityConfig::default()),
        track: TrackConfig {
            enabled: false,
            ..Default::default()
        },
        periodic: PeriodicConfig {
            enabled: false,
            ..Default::default()
        },
        random: RandomConfig::default(),
    }
}

fn off(c: ActivityConfig) -> ActivityConfig {
    ActivityConfig {
        enabled: false,
        ..c
    }
}

fn trigger(config: TriggerConfig, links: usize, credits: u64) -> Trigger {
    Trigger::new(config, CLOCK_HZ, links, sources(), credits, Instant::now()).unwrap()
}

fn sources() -> Vec<SourceId> {
    vec![SourceId::readout(0), SourceId::readout(1)]
}

/// Three TPs within 50 ticks at `t`: one multiplicity candidate at `t`.
fn burst(t: u64) -> Vec<TriggerPrimitive> {
    (0..3)
        .map(|i| TriggerPrimitive {
            channel: i,
            time_start: t + 10 * i as u64,
            ..Default::default()
        })
        .collect()
}

fn feed(trigger: &mut Trigger, tps: Vec<TriggerPrimitive>, horizon: u64) -> Vec<TriggerDecision> {
    let now = Instant::now();
    trigger.on_tps(
        TpBatch {
            link: 0,
            tps,
            horizon,
            released_at: now,
        },
        now,
    );
    let mut out = Vec::new();
    trigger.poll(now, &mut out);
    out
}

#[test]
fn a_decision_reads_every_source_around_its_time_once_its_window_has_passed() {
    let mut t = trigger(config(InhibitPolicy::Hold), 1, 10);
    assert!(
        feed(&mut t, burst(10_000), 10_500).is_empty(),
        "window still open"
    );
    let out = feed(&mut t, vec![], 11_000);
    assert_eq!(out.len(), 1);
    let d = &out[0];
    assert_eq!((d.trigger_number, d.timestamp), (1, 10_000));
    assert_eq!(d.trigger_type, trigger_type::MULTIPLICITY);
    assert_eq!(d.windows.len(), 2);
    assert!(
        d.windows
            .iter()
            .all(|w| (w.begin, w.end) == (9_900, 11_000))
    );
    assert_eq!(t.latencies().len(), 1);
}

#[test]
fn candidates_inside_an_open_window_merge_and_later_ones_make_new_decisions() {
    let mut t = trigger(config(InhibitPolicy::Hold), 1, 10);
    let mut tps = burst(10_000);
    tps.extend(burst(10_500));
    tps.extend(burst(20_000));
    let out = feed(&mut t, tps, 30_000);
    let got: Vec<(u64, u64, u32)> = out
        .iter()
        .map(|d| (d.trigger_number, d.timestamp, d.candidates))
        .collect();
    assert_eq!(got, [(1, 10_000, 2), (2, 20_000, 1)]);
    assert_eq!(t.counts().merged, 1);
}

#[test]
fn without_credit_decisions_are_held_up_to_the_limit_then_dropped_and_counted() {
    let mut t = trigger(config(InhibitPolicy::Hold), 1, 1);
    let tps: Vec<_> = (1..=4).flat_map(|k| burst(k * 10_000)).collect();
    let out = feed(&mut t, tps, 100_000);
    assert_eq!(out.len(), 1, "one credit");
    assert_eq!(t.held(), 2);
    assert_eq!(t.counts().dropped_busy, 1);
    let mut more = Vec::new();
    t.add_credits(5, Instant::now(), &mut more);
    let numbers: Vec<(u64, u64)> = more
        .iter()
        .map(|d| (d.trigger_number, d.timestamp))
        .collect();
    assert_eq!(
        numbers,
        [(2, 20_000), (3, 30_000)],
        "held ones go out in order"
    );
    assert_eq!(t.counts().held_then_issued, 2);
}

#[test]
fn with_the_drop_policy_busy_decisions_are_dropped_at_once() {
    let mut t = trigger(config(InhibitPolicy::Drop), 1, 0);
    let tps: Vec<_> = (1..=3).flat_map(|k| burst(k * 10_000)).collect();
    assert!(feed(&mut t, tps, 100_000).is_empty());
    assert_eq!((t.held(), t.counts().dropped_busy), (0, 3));
}

#[test]
fn periodic_triggers_follow_data_time_and_merge_with_activity() {
    let mut c = config(InhibitPolicy::Hold);
    c.periodic = PeriodicConfig {
        enabled: true,
        rate_hz: 62.5e6 / 50_000.0,
        prescale: 1,
    };
    let mut t = Trigger::new(c, CLOCK_HZ, 1, sources(), 100, Instant::now()).unwrap();
    feed(&mut t, vec![], 1);
    let out = feed(&mut t, burst(50_500), 200_000);
    let got: Vec<(u64, u64)> = out.iter().map(|d| (d.timestamp, d.trigger_type)).collect();
    assert_eq!(
        got,
        [
            (50_001, trigger_type::PERIODIC | trigger_type::MULTIPLICITY),
            (100_001, trigger_type::PERIODIC),
            (150_001, trigger_type::PERIODIC),
        ]
    );
}

#[test]
fn paused_triggers_issue_nothing_new_and_count_what_they_pass_over() {
    let mut t = trigger(config(InhibitPolicy::Hold), 1, 10);
    assert_eq!(feed(&mut t, burst(10_000), 15_000).len(), 1);
    t.control(&TriggerControl::Pause).unwrap();
    assert!(feed(&mut t, burst(20_000), 25_000).is_empty());
    assert_eq!(t.counts().paused_away, 1);
    t.control(&TriggerControl::Resume).unwrap();
    let out = feed(&mut t, burst(30_000), 35_000);
    let got: Vec<(u64, u64)> = out
        .iter()
        .map(|d| (d.trigger_number, d.timestamp))
        .collect();
    assert_eq!(got, [(2, 30_000)], "numbers stay consecutive");
}

#[test]
fn prescale_and_rate_change_while_running_and_a_bad_change_is_refused() {
    let mut c = config(InhibitPolicy::Hold);
    c.periodic = PeriodicConfig {
        enabled: true,
        rate_hz: 62.5e6 / 50_000.0,
        prescale: 1,
    };
    c.multiplicity.enabled = false;
    let mut t = Trigger::new(c, CLOCK_HZ, 1, sources(), 100, Instant::now()).unwrap();
    feed(&mut t, vec![], 1);
    assert_eq!(feed(&mut t, vec![], 200_000).len(), 3, "every 50 000 ticks");
    let change = |prescale, rate_hz| {
        TriggerControl::Change(TriggerChange {
            trigger: "periodic".into(),
            prescale,
            rate_hz,
        })
    };
    t.control(&change(None, Some(62.5e6 / 10_000.0))).unwrap();
    assert_eq!(
        feed(&mut t, vec![], 300_000).len(),
        10,
        "every 10 000 ticks"
    );
    t.control(&change(Some(5), None)).unwrap();
    assert_eq!(feed(&mut t, vec![], 400_000).len(), 2, "one in five");
    assert!(t.control(&change(Some(0), None)).is_err());
    assert_eq!(t.counts().refused_controls, 1);
    assert_eq!(feed(&mut t, vec![], 500_000).len(), 2, "unchanged");
}

#[test]
fn a_link_that_stops_delays_decisions_by_the_late_link_wait_only() {
    let mut c = config(InhibitPolicy::Hold);
    c.late_link_wait_ms = 20;
    let t0 = Instant::now();
    let mut t = Trigger::new(c, CLOCK_HZ, 2, sources(), 10, t0).unwrap();
    let batch = |link, tps, horizon| TpBatch {
        link,
        tps,
        horizon,
        released_at: t0,
    };
    t.on_tps(batch(0, burst(10_000), 50_000), t0);
    let mut out = Vec::new();
    t.poll(t0, &mut out);
    assert!(out.is_empty(), "link 1 has said nothing yet");
    let later = t0 + Duration::from_millis(30);
    t.on_tps(batch(0, vec![], 60_000), later);
    t.poll(later, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(t.counts().merge.stale_link_events, 1);
}

proptest! {
    /// However the TPs are split across links and batches, the decisions are the same.
    #[test]
    fn decisions_do_not_depend_on_how_tps_arrive(
        times in proptest::collection::vec(0u64..200_000, 0..300),
        splits in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let mut times = times;
        times.sort_unstable();
        let tps: Vec<TriggerPrimitive> = times
            .iter()
            .enumerate()
            .map(|(i, &t)| TriggerPrimitive { channel: (i % 7) as u32, time_start: t, ..Default::default() })
            .collect();
        let end = 300_000;
        let t0 = Instant::now();
        let reference = {
            let mut t = Trigger::new(config(InhibitPolicy::Hold), CLOCK_HZ, 1, sources(), 1000, t0).unwrap();
            let mut out = feed(&mut t, tps.clone(), end);
            t.finish(t0, &mut out);
            out
        };
        let mut t = Trigger::new(config(InhibitPolicy::Hold), CLOCK_HZ, 3, sources(), 1000, t0).unwrap();
        let mut bounds: Vec<usize> = splits.into_iter().map(|s| s.min(tps.len())).collect();
        bounds.push(tps.len());
        bounds.sort_unstable();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in &bounds {
            let horizon = tps.get(to).map_or(end, |tp| tp.time_start);
            for link in 0..3 {
                let mine = tps[from..to].iter().enumerate().filter(|(i, _)| (from + i) % 3 == link).map(|(_, tp)| *tp).collect();
                t.on_tps(TpBatch { link, tps: mine, horizon, released_at: t0 }, t0);
            }
            t.poll(t0, &mut out);
            from = to;
        }
        t.finish(t0, &mut out);
        prop_assert_eq!(out, reference);
    }
}

//! Hit finding inside the ingest loop: TPs come out time-ordered (WIBEth and ProtoDUNE WIB
//! links), and a link fed garbage on another thread changes nothing of a good link's frames
//! or TPs.

use swdaq_format::{FrameFormat, SourceId, TriggerPrimitive, protowib, wibeth};
use swdaq_readout::hit_finding::HitFindingObserver;
use swdaq_readout::link::LinkMetrics;
use swdaq_readout::link::{FrameObserver, Ingest, LinkShared};
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_sim::{Detector, SimConfig};
use swdaq_tpg::{HitFinder, Implementation, ThresholdConfig};

struct Frames(std::vec::IntoIter<Vec<u8>>);
impl FrameSource for Frames {
    fn next_frame(&mut self, slot: &mut [u8]) -> std::io::Result<Poll> {
        Ok(match self.0.next() {
            Some(f) => {
                // Like a datagram receive: what does not fit is cut, the true length reported.
                let n = f.len().min(slot.len());
                slot[..n].copy_from_slice(&f[..n]);
                Poll::Frame(f.len())
            }
            None => Poll::End,
        })
    }
}

fn emulated(frames: usize) -> Vec<Vec<u8>> {
    emulated_as(FrameFormat::WibEth, frames)
}

fn emulated_as(format: FrameFormat, frames: usize) -> Vec<Vec<u8>> {
    let config = SimConfig {
        blip_rate_hz: 200.0,
        ..SimConfig::default()
    };
    let mut link = Detector::new(config).unwrap().link(1, format, 0);
    (0..frames)
        .map(|_| {
            let mut b = vec![0u8; format.frame_size()];
            let info = link.next_frame(&mut b);
            b.truncate(info.len);
            b
        })
        .collect()
}

/// The default hit finder as an observer, for channels with offline ids `ids`.
fn observer(ids: std::ops::Range<u32>) -> HitFindingObserver {
    let finder = HitFinder::new(
        ThresholdConfig::default(),
        ids.collect(),
        32,
        3,
        Implementation::best(),
    )
    .unwrap();
    HitFindingObserver::new(finder, FrameFormat::WibEth)
}

/// Ingests `frames` into a fresh link with `observer`; returns the frames buffered and the
/// observer (the link's counts go to `metrics` if given).
fn ingest(
    frames: Vec<Vec<u8>>,
    observer: HitFindingObserver,
    metrics: Option<LinkMetrics>,
) -> (u64, HitFindingObserver) {
    let link = LinkShared::new(SourceId::readout(1), FrameFormat::WibEth, 0.1).unwrap();
    let mut ingest = Ingest::new(&link, Frames(frames.into_iter()), observer).unwrap();
    if let Some(m) = metrics {
        ingest = ingest.with_metrics(m);
    }
    ingest.run(|| true).unwrap();
    (ingest.counts.frames, ingest.into_parts().1)
}

fn run_link(frames: Vec<Vec<u8>>) -> (u64, Vec<TriggerPrimitive>) {
    let (frames_in, mut observer) = ingest(frames, observer(0..64), None);
    observer.finish();
    let mut tps = Vec::new();
    observer.take_tps(&mut tps);
    (frames_in, tps)
}

#[test]
fn tps_are_time_ordered_and_unaffected_by_a_garbage_link() {
    let good = emulated(600);
    let (frames_alone, tps_alone) = run_link(good.clone());
    assert_eq!(frames_alone, 600);
    assert!(tps_alone.len() > 20, "only {} TPs", tps_alone.len());
    assert!(
        tps_alone
            .windows(2)
            .all(|w| w[0].time_start <= w[1].time_start)
    );

    let garbage: Vec<Vec<u8>> = (0..600u32)
        .map(|i| (0..(i * 37) % 7300).map(|b| (b ^ i) as u8).collect())
        .collect();
    let (with_garbage, garbage_result) = std::thread::scope(|s| {
        let g = s.spawn(|| run_link(good));
        let b = s.spawn(|| run_link(garbage));
        (g.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(with_garbage, (frames_alone, tps_alone));
    assert!(garbage_result.0 < 600);
}

#[test]
fn a_protodune_wib_link_gives_the_finders_own_tps_time_ordered() {
    let frames = emulated_as(FrameFormat::ProtoWib, 40_000);
    let finder = || {
        HitFinder::new(
            ThresholdConfig::default(),
            (0..protowib::NUM_CHANNELS as u32).collect(),
            protowib::TICKS_PER_SAMPLE,
            3,
            Implementation::best(),
        )
        .and_then(|f| f.with_adc_bits(protowib::BITS_PER_ADC))
        .unwrap()
    };
    let link = LinkShared::new(SourceId::readout(1), FrameFormat::ProtoWib, 0.1).unwrap();
    let observer = HitFindingObserver::new(finder(), FrameFormat::ProtoWib);
    let mut ingest = Ingest::new(&link, Frames(frames.clone().into_iter()), observer).unwrap();
    ingest.run(|| true).unwrap();
    assert_eq!(ingest.counts.frames, 40_000);
    let mut observer = ingest.into_parts().1;
    assert_eq!(observer.unreadable_frames, 0);
    observer.finish();
    let mut tps = Vec::new();
    observer.take_tps(&mut tps);
    assert!(tps.len() > 20, "only {} TPs", tps.len());
    assert!(tps.windows(2).all(|w| w[0].time_start <= w[1].time_start));

    let mut direct = finder();
    let mut expected = Vec::new();
    for f in &frames {
        direct
            .process_frame(FrameFormat::ProtoWib, f, &mut expected)
            .unwrap();
    }
    direct.flush(&mut expected);
    let key = |tp: &TriggerPrimitive| (tp.time_start, tp.channel);
    expected.sort_by_key(key);
    tps.sort_by_key(key);
    assert_eq!(tps, expected);
}

#[test]
fn the_link_reports_its_counts_through_the_monitoring_registry() {
    let registry = swdaq_monitor::Registry::new();
    let metrics = LinkMetrics::register(&registry, "readout-1", 1, SourceId::readout(1)).unwrap();
    let mut frames = emulated(700);
    frames[100].truncate(50);
    frames.remove(200);
    let (frames_in, observer) = ingest(frames, observer(0..64), Some(metrics));
    let tps = observer.tps_found();
    assert_eq!(frames_in, 698);
    let snapshot = swdaq_monitor::Collector::new(registry).collect();
    let total = |name: &str| match &snapshot
        .families
        .iter()
        .find(|f| f.name == name)
        .expect(name)
        .series[0]
        .value
    {
        swdaq_monitor::Value::Counter { total, .. } => *total,
        other => panic!("{name} is {other:?}"),
    };
    assert_eq!(total("swdaq_readout_frames_total"), 698);
    assert_eq!(total("swdaq_readout_bad_size_frames_total"), 1);
    assert_eq!(total("swdaq_readout_missing_frames_total"), 2);
    assert_eq!(total("swdaq_tpg_trigger_primitives_total"), tps);
    assert!(tps > 0);
}

#[test]
fn a_noisy_channel_is_found_and_masked() {
    // Link 1 of the emulator carries offline channels 1632..1696; make 1642 noisy.
    let config = SimConfig {
        noisy_channels: vec![1642],
        noisy_factor: 5.0,
        ..SimConfig::default()
    };
    let mut sim = Detector::new(config)
        .unwrap()
        .link(1, FrameFormat::WibEth, 0);
    let frames: Vec<Vec<u8>> = (0..3000)
        .map(|_| {
            let mut b = vec![0u8; wibeth::FRAME_SIZE];
            sim.next_frame(&mut b);
            b
        })
        .collect();
    let noisy = swdaq_tpg::NoisyConfig {
        window_ticks: 1000 * 2048,
        auto_mask: true,
        ..Default::default()
    };
    let (_, mut observer) = ingest(
        frames,
        observer(1632..1696).with_noisy_channel_detection(noisy),
        None,
    );
    assert_eq!(
        observer
            .noisy_channels()
            .iter()
            .map(|n| n.channel)
            .collect::<Vec<_>>(),
        vec![1642]
    );
    observer.finish();
    let mut tps = Vec::new();
    observer.take_tps(&mut tps);
    let last_noisy = tps
        .iter()
        .filter(|tp| tp.channel == 1642)
        .map(|tp| tp.time_start)
        .max()
        .unwrap();
    assert!(
        last_noisy < 1100 * 2048,
        "masked after the first window, yet a TP at {last_noisy}"
    );
}

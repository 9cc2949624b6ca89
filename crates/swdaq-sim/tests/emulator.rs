//! The emulator's output statistics and truth match its configuration.

use swdaq_format::protowib::ProtoWibFrame;
use swdaq_format::wibeth::{self, WibEthFrame};
use swdaq_sim::*;

const CH: usize = wibeth::NUM_CHANNELS;

/// All samples of `frames` frames of one link, channel-major: `out[c]` is channel c's waveform.
fn waveforms(link: &mut LinkSimulator, frames: usize) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::new(); CH];
    for _ in 0..frames {
        let adcs = link.next_adcs();
        for (i, &v) in adcs.iter().enumerate() {
            out[i % CH].push(v as f64);
        }
    }
    out
}

fn mean_and_sigma(x: &[f64]) -> (f64, f64) {
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
    (mean, var.sqrt())
}

#[test]
fn pedestals_and_white_noise_match_the_configuration() {
    let det = Detector::new(SimConfig::white_noise_only(4.0)).unwrap();
    let mut link = det.link(0, FrameFormat::WibEth, 0);
    let w = waveforms(&mut link, 300);
    let mut pooled = 0.0;
    for (c, samples) in w.iter().enumerate() {
        let (mean, sigma) = mean_and_sigma(samples);
        assert!(
            (mean - link.pedestal(c)).abs() < 0.2,
            "channel {c}: mean {mean} vs pedestal {}",
            link.pedestal(c)
        );
        pooled += sigma * sigma;
    }
    let sigma = (pooled / CH as f64).sqrt();
    assert!(
        (sigma / 4.0 - 1.0).abs() < 0.02,
        "white noise sigma {sigma}, configured 4.0"
    );
    // Link 0 of the default map holds induction (V, ~2350 ADC) and collection (~900) channels.
    for c in 0..CH {
        let (_, plane) = link.channel_info(c);
        let nominal = if plane.is_collection() { 900.0 } else { 2350.0 };
        assert!(
            (link.pedestal(c) - nominal).abs() < 100.0,
            "channel {c} ({plane:?})"
        );
    }
    assert!((0..CH).any(|c| link.channel_info(c).1 == Plane::V));
    assert!((0..CH).any(|c| link.channel_info(c).1 == Plane::X));
}

#[test]
fn total_noise_matches_the_prediction() {
    let config = SimConfig {
        blip_rate_hz: 0.0,
        track_rate_hz: 0.0,
        drift_amplitude: 0.0,
        ..SimConfig::default()
    };
    let det = Detector::new(config.clone()).unwrap();
    let mut link = det.link(1, FrameFormat::WibEth, 0);
    let w = waveforms(&mut link, 600);
    let pooled = w.iter().map(|s| mean_and_sigma(s).1.powi(2)).sum::<f64>() / CH as f64;
    let expected = config.expected_noise_sigma();
    assert_eq!(link.expected_noise_sigma(0), expected);
    assert!(
        (pooled.sqrt() / expected - 1.0).abs() < 0.03,
        "total sigma {} vs {expected}",
        pooled.sqrt()
    );
}

#[test]
fn every_true_pulse_is_in_the_noiseless_data_at_its_peak() {
    let config = SimConfig {
        white_noise_sigma: 0.0,
        low_frequency_sigma: 0.0,
        coherent_sigma: 0.0,
        drift_amplitude: 0.0,
        pedestal_spread: 0.0,
        blip_rate_hz: 200.0,
        track_rate_hz: 0.0,
        ..SimConfig::default()
    };
    let det = Detector::new(config).unwrap();
    for link_id in [0, 1] {
        let mut link = det.link(link_id, FrameFormat::WibEth, 1 << 30);
        let w = waveforms(&mut link, 400);
        let truth = link.drain_truth();
        assert!(truth.len() > 100, "only {} pulses", truth.len());
        let mut checked = 0;
        for p in &truth {
            let isolated = truth.iter().all(|q| {
                q == p || q.channel != p.channel || q.start_tick.abs_diff(p.start_tick) > 1500
            });
            let sample = (p.peak_tick - (1 << 30)) as f64 / 32.0;
            let s = sample.round() as usize;
            if !isolated || s + 1 >= w[0].len() {
                continue;
            }
            let c = p.channel as usize;
            let baseline = link.pedestal(c);
            // The sampled peak is within half a sample of the true one: a few % below it
            // (more for the narrower bipolar lobe).
            let floor = if p.plane.is_collection() { 0.93 } else { 0.85 };
            let seen = (s.saturating_sub(1)..=s + 1)
                .map(|i| w[c][i] - baseline)
                .fold(f64::MIN, f64::max);
            assert!(
                seen <= p.peak_adc + 0.6 && seen >= p.peak_adc * floor - 0.6,
                "{p:?}: saw {seen}"
            );
            checked += 1;
        }
        assert!(checked > 50);
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let frames = |seed| {
        let det = Detector::new(SimConfig {
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        let mut link = det.link(2, FrameFormat::WibEth, 1000);
        let mut buf = vec![0u8; wibeth::FRAME_SIZE * 50];
        for f in buf.chunks_exact_mut(wibeth::FRAME_SIZE) {
            link.next_frame(f);
        }
        (buf, link.drain_truth())
    };
    assert_eq!(frames(7), frames(7));
    assert_ne!(frames(7).0, frames(8).0);
}

#[test]
fn tracks_are_seen_consistently_across_links() {
    let config = SimConfig {
        track_rate_hz: 2000.0,
        blip_rate_hz: 0.0,
        ..SimConfig::default()
    };
    let det = Detector::new(config).unwrap();
    let tracks = |id| {
        let mut link = det.link(id, FrameFormat::WibEth, 0);
        for _ in 0..300 {
            link.next_adcs();
        }
        link.drain_truth()
    };
    let (a, b) = (tracks(1), tracks(2));
    assert_eq!(
        b,
        tracks(2),
        "a link's tracks do not depend on which links ran before"
    );
    // A track crossing from link 1's last channel to link 2's first shows up on both, close in time.
    let last = a.iter().filter(|p| p.channel == 63);
    let matched = last
        .clone()
        .filter(|p| {
            b.iter()
                .any(|q| q.channel == 0 && q.start_tick.abs_diff(p.start_tick) <= 80)
        })
        .count();
    assert!(
        last.count() > 5 && matched > 0,
        "no track crosses the link boundary"
    );
}

#[test]
fn encoded_frames_decode_to_the_generated_samples() {
    let det = Detector::new(SimConfig::default()).unwrap();
    let mut twin = det.link(3, FrameFormat::WibEth, 0);
    let mut link = det.link(3, FrameFormat::WibEth, 0);
    let mut buf = vec![0u8; wibeth::FRAME_SIZE];
    let mut out = [[0u16; CH]; 64];
    for n in 0..20u64 {
        let info = link.next_frame(&mut buf);
        assert_eq!(info.len, wibeth::FRAME_SIZE);
        let frame = WibEthFrame::parse(&buf).unwrap();
        frame.unpack(&mut out);
        assert_eq!(out.as_flattened(), twin.next_adcs());
        assert_eq!(
            (frame.timestamp(), frame.daq_header().seq_id),
            (n * 2048, n as u16)
        );
        assert!(!frame.wib_header().has_error());
    }
    let mut proto = det.link(0, FrameFormat::ProtoWib, 500);
    let mut buf = vec![0u8; swdaq_format::protowib::FRAME_SIZE];
    for n in 0..10u64 {
        proto.next_frame(&mut buf);
        assert_eq!(
            ProtoWibFrame::parse(&buf).unwrap().timestamp(),
            500 + n * 25
        );
    }
}

#[test]
fn faults_appear_at_their_rates_exactly_where_reported() {
    for kind in [
        FaultKind::Missing,
        FaultKind::TimestampJump,
        FaultKind::SequenceGap,
        FaultKind::HeaderError,
        FaultKind::Corrupt,
        FaultKind::Truncated,
    ] {
        let faults = FaultRates::only(kind, 0.02);
        let det = Detector::new(SimConfig {
            faults,
            ..SimConfig::white_noise_only(4.0)
        })
        .unwrap();
        let mut link = det.link(0, FrameFormat::WibEth, 0);
        let mut buf = vec![0u8; wibeth::FRAME_SIZE];
        let mut infos = Vec::new();
        for _ in 0..3000 {
            infos.push(link.next_frame(&mut buf));
            let info = infos.last().unwrap();
            if info.fault == Some(FaultKind::HeaderError) {
                assert!(WibEthFrame::parse(&buf).unwrap().wib_header().has_error());
            }
        }
        let truth = link.drain_faults();
        // 3000 frames at 2%: 60 expected, 5 sigma is about 38.
        assert!(
            (30..100).contains(&truth.len()),
            "{kind:?}: {} faults",
            truth.len()
        );
        for f in &truth {
            let info = infos[f.frame_index as usize];
            assert_eq!((f.kind, f.timestamp), (kind, info.timestamp));
            assert_eq!(Some(kind), info.fault);
            match kind {
                FaultKind::Missing => assert_eq!(info.len, 0),
                FaultKind::Truncated => {
                    assert!(info.len < wibeth::FRAME_SIZE && info.len as u64 == f.detail)
                }
                _ => assert_eq!(info.len, wibeth::FRAME_SIZE),
            }
        }
        assert_eq!(
            infos.iter().filter(|i| i.fault.is_some()).count(),
            truth.len()
        );
    }
}

#[test]
fn pathologies_show_in_the_data() {
    let config = SimConfig {
        noisy_channels: vec![1600],
        dead_channels: vec![1601],
        stuck_bits: vec![StuckBit {
            channel: 1602,
            bit: 0,
            value: true,
        }],
        ..SimConfig::white_noise_only(4.0)
    };
    let det = Detector::new(config).unwrap();
    let mut link0 = det.link(0, FrameFormat::WibEth, 0); // offline 1568..1632
    let w = waveforms(&mut link0, 100);
    let (c_noisy, c_dead, c_stuck) = (1600 - 1568, 1601 - 1568, 1602 - 1568);
    assert!(mean_and_sigma(&w[c_noisy]).1 > 15.0);
    assert_eq!(mean_and_sigma(&w[c_dead]).1, 0.0);
    assert!(w[c_stuck].iter().all(|&v| v as u16 & 1 == 1));
    assert_eq!(link0.expected_noise_sigma(c_dead), 0.0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]
    #[test]
    fn any_valid_config_generates_in_range_without_panicking(
        seed in 0u64..1000, sigma in 0.0f64..2000.0, blips in 0.0f64..5000.0, tracks in 0.0f64..1000.0, mean in 0.0f64..20000.0,
    ) {
        let config = SimConfig { seed, white_noise_sigma: sigma, blip_rate_hz: blips, track_rate_hz: tracks, track_mean_adc: mean, blip_mean_adc: mean, ..SimConfig::default() };
        let det = Detector::new(config).unwrap();
        let mut link = det.link(0, FrameFormat::WibEth, u64::MAX / 4);
        for _ in 0..5 {
            proptest::prop_assert!(link.next_adcs().iter().all(|&v| v <= 16383));
        }
    }
}

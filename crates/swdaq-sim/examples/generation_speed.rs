//! Rough generation speed of one link at the default configuration:
//! `cargo run --release -p swdaq-sim --example generation_speed [frames]`.

use std::time::Instant;
use swdaq_sim::{Detector, FrameFormat, SimConfig};

fn main() {
    let frames: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let detector = Detector::new(SimConfig::default()).expect("default config is valid");
    let mut link = detector.link(1, FrameFormat::WibEth, 0);
    let mut buf = vec![0u8; link.frame_size()];
    let start = Instant::now();
    for _ in 0..frames {
        link.next_adcs();
    }
    let adcs_only = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for _ in 0..frames {
        link.next_frame(&mut buf);
    }
    let encoded = start.elapsed().as_secs_f64();
    let samples = (frames * 64 * 64) as f64;
    println!(
        "{frames} frames: samples {:.0} M/s, encoded frames {:.0} M samples/s ({:.1} x real time per link)",
        samples / adcs_only / 1e6,
        samples / encoded / 1e6,
        frames as f64 * 2048.0 / 62.5e6 / encoded
    );
}

//! Cost of one hot-path update: `cargo bench -p swdaq-monitor`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use divan::black_box;
use swdaq_monitor::Registry;

fn main() {
    divan::main();
}

#[divan::bench]
fn counter_add(b: divan::Bencher) {
    let registry = Registry::new();
    let mut block = registry.block("bench", &[]);
    let c = block.counter("c_total", "c").unwrap();
    b.bench_local(|| c.add(black_box(3)));
}

#[divan::bench]
fn gauge_set(b: divan::Bencher) {
    let registry = Registry::new();
    let mut block = registry.block("bench", &[]);
    let g = block.gauge("g", "g").unwrap();
    b.bench_local(|| g.set(black_box(0.5)));
}

#[divan::bench]
fn histogram_observe(b: divan::Bencher) {
    let registry = Registry::new();
    let mut block = registry.block("bench", &[]);
    let h = block
        .histogram("h_seconds", "h", &[1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1])
        .unwrap();
    b.bench_local(|| h.observe(black_box(3e-4)));
}

/// For comparison: an uncontended lock-prefixed read-modify-write.
#[divan::bench]
fn atomic_fetch_add(b: divan::Bencher) {
    let a = AtomicU64::new(0);
    b.bench_local(|| a.fetch_add(black_box(3), Relaxed));
}

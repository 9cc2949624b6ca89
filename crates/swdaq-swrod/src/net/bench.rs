//! The FELIX network intake's cost (library side of `swdaq bench swrod`): one card published
//! flat out by a FELIX server over TCP on 127.0.0.1 to one subscriber taking every e-link,
//! each side's thread CPU time, against the CPU time of emulating the same card in process
//! (what the SW ROD's intake costs with emulated cards). Both in the same run.

use super::server::{ServerConfig, publish};
use super::subscriber::{Intake, Subscriber};
use crate::bench::BenchConfig;
use serde::Serialize;
use std::net::TcpListener;
use std::time::Duration;
use swdaq_format::felix::{BLOCK_SIZE, TTC_TO_HOST_ELINK};
use swdaq_sim::felix::{FelixCard, FelixConfig, L1_RATE_HZ};

#[derive(Debug, Clone, Serialize)]
pub struct IntakeResult {
    pub l1as: u64,
    pub blocks: u64,
    pub bytes: u64,
    /// The subscriber's thread: receiving every block (framing and sequence checks).
    pub subscriber_cpu_s: f64,
    /// The server's thread: emulating the card and sending every block.
    pub server_cpu_s: f64,
    /// Emulating the same card into memory, in process.
    pub emulator_cpu_s: f64,
    pub wall_s: f64,
    /// Received bytes per CPU second of the subscriber.
    pub subscriber_gbytes_per_cpu_s: f64,
    /// Cards (`elinks` e-links at 100 kHz) one core receives from the network.
    pub subscriber_cards_per_core: f64,
    /// Cards one core emulates.
    pub emulator_cards_per_core: f64,
    /// Subscriber CPU per block over the emulator's (below 1: the network is the cheaper intake).
    pub subscriber_vs_emulator: f64,
}

fn card(config: &BenchConfig) -> FelixConfig {
    FelixConfig {
        elinks: config.elinks,
        chunk_min: config.chunk_bytes,
        chunk_max: config.chunk_bytes,
        ttc_to_host: true,
        ..FelixConfig::default()
    }
}

pub fn network_intake(config: &BenchConfig) -> Result<IntakeResult, Box<dyn std::error::Error>> {
    let l1as = config.l1as as u64;
    // Into one reused buffer, as a card thread hands its blocks on batch by batch.
    let emulator_cpu = cpu_time::ThreadTime::now();
    let mut emulator = FelixCard::new(card(config))?;
    let mut blocks = Vec::new();
    let mut emulated_bytes = 0u64;
    for _ in 0..l1as {
        emulator.l1_accept(&mut blocks);
        emulated_bytes += blocks.len() as u64;
        blocks.clear();
    }
    emulator.flush(&mut blocks);
    emulated_bytes += blocks.len() as u64;
    let emulator_cpu_s = emulator_cpu.elapsed().as_secs_f64();

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server_config = ServerConfig {
        card: 0,
        felix: card(config),
        l1as,
        rate_hz: 0.0,
        wait_for_subscribers: Duration::from_secs(10),
    };
    let server = std::thread::spawn(move || {
        let cpu = cpu_time::ThreadTime::now();
        publish(listener, &server_config, |_| Ok(())).map(|p| (p, cpu.elapsed().as_secs_f64()))
    });
    let elinks: Vec<u16> = (0..config.elinks).chain([TTC_TO_HOST_ELINK]).collect();
    let wall = std::time::Instant::now();
    let cpu = cpu_time::ThreadTime::now();
    let mut subscriber = Subscriber::connect(
        addr,
        &elinks,
        Duration::from_secs(10),
        Duration::ZERO,
        || false,
    )?;
    let mut bytes = 0u64;
    loop {
        match subscriber.receive()? {
            Intake::Blocks(b) => bytes += b.len() as u64,
            Intake::Idle => {}
            Intake::End(_) => break,
        }
    }
    let subscriber_cpu_s = cpu.elapsed().as_secs_f64();
    let wall_s = wall.elapsed().as_secs_f64();
    let (published, server_cpu_s) = server.join().map_err(|_| "the FELIX server panicked")??;
    if bytes != emulated_bytes || subscriber.counts.blocks_missing > 0 {
        return Err(format!(
            "received {bytes} bytes of the {emulated_bytes} the card made ({} blocks published)",
            published.blocks
        )
        .into());
    }
    let card_bytes_per_s = bytes as f64 / l1as as f64 * L1_RATE_HZ;
    Ok(IntakeResult {
        l1as,
        blocks: bytes / BLOCK_SIZE as u64,
        bytes,
        subscriber_cpu_s,
        server_cpu_s,
        emulator_cpu_s,
        wall_s,
        subscriber_gbytes_per_cpu_s: bytes as f64 / subscriber_cpu_s / 1e9,
        subscriber_cards_per_core: bytes as f64 / subscriber_cpu_s / card_bytes_per_s,
        emulator_cards_per_core: bytes as f64 / emulator_cpu_s / card_bytes_per_s,
        subscriber_vs_emulator: subscriber_cpu_s / emulator_cpu_s,
    })
}

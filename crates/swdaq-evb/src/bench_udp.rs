//! `swdaq bench evb-udp`: what one readout unit's FED links take over UDP loopback on one
//! core, each FED's socket read `batch` datagrams per `recvmmsg` (1: one `recvmsg` each),
//! every batch size in the same run. Each burst of events is sent first and waits in the
//! sockets (a burst fits their buffers); then the unit takes the burst's events — receive,
//! placement by level-1 id, checks, super-fragment — and only that is timed, in CPU time of
//! the thread, as `swdaq bench readout` times the UDP receive of WIBEth frames.
//!
//! In the same run, the TCP row: the same FEDs as FEROL streams over TCP loopback
//! (`ferol_tcp`, `feds_per_stream` FEDs per stream), timed the same way. A TCP connection's
//! buffers hold less than a UDP burst, so a sender thread writes each burst of
//! [`TCP_BURST_EVENTS`] into the connections first and the unit then takes it: receive,
//! deframing, placement, checks, super-fragment, in the unit thread's CPU time.

use crate::ferol_tcp::FerolStream;
use crate::metrics::{load_average, thread_cpu_ns};
use crate::pause::TriggerClock;
use crate::producer::{FedSource, Producer};
use serde::Serialize;
use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use swdaq_format::ferol::encode_ferol_blocks;
use swdaq_readout::udp::{UdpSender, UdpSource};
use swdaq_sim::fed::{FedEmulator, FedEvent, FedSimConfig};

/// Events sent before the unit takes them: 512 datagrams of ~1 KiB per socket, well inside a
/// 4 MiB receive buffer (`net.core.rmem_max` here); a smaller one drops, and says so.
const BURST_EVENTS: u64 = 512;
/// Events per TCP burst: 16 events of two ~1 KiB FEDs are about 35 KB per stream, within
/// what a loopback connection buffers before the reader reads.
pub const TCP_BURST_EVENTS: u64 = 16;

#[derive(Debug, Clone, Serialize)]
pub struct UdpIntakeRow {
    /// Datagrams per receive call.
    pub batch: usize,
    pub fragments: u64,
    pub ns_per_fragment: f64,
    pub fragments_per_core_second: f64,
    pub gbps_per_core: f64,
    /// Datagrams the kernel dropped (must be 0 for the figure to stand).
    pub kernel_dropped: u64,
    /// Fragments that failed a check or were missing (must be 0).
    pub bad_fragments: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TcpIntakeRow {
    pub feds_per_stream: usize,
    pub fragments: u64,
    pub ns_per_fragment: f64,
    pub fragments_per_core_second: f64,
    pub gbps_per_core: f64,
    /// Fragments that failed a check or were missing (must be 0).
    pub bad_fragments: u64,
    /// FEROL header corruptions counted (must be 0).
    pub corrupt: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct UdpIntakeResult {
    pub feds: u16,
    pub fed_bytes: u32,
    pub events: u64,
    pub rows: Vec<UdpIntakeRow>,
    /// One-at-a-time ns per fragment over the largest batch's, same run.
    pub batched_speedup: f64,
    /// The same FEDs as FEROL streams over TCP, same run.
    pub tcp: TcpIntakeRow,
    /// TCP fragments/s per core over UDP's at the default batch, same run.
    pub tcp_over_udp: f64,
    pub load_average: f64,
}

/// `events` events of `feds` FEDs of `fed_bytes` (spread an eighth) for each batch size.
pub fn udp_intake(
    feds: u16,
    fed_bytes: u32,
    events: u64,
    batches: &[usize],
) -> io::Result<UdpIntakeResult> {
    let config = bench_feds(feds, fed_bytes);
    let rows = batches
        .iter()
        .map(|&batch| measure(&config, events, batch))
        .collect::<io::Result<Vec<_>>>()?;
    let ns = |r: Option<&UdpIntakeRow>| r.map_or(f64::NAN, |r| r.ns_per_fragment);
    let one = ns(rows.iter().find(|r| r.batch == 1));
    let largest = ns(rows.iter().max_by_key(|r| r.batch));
    let tcp = measure_tcp(&config, events, 2.min(feds as usize))?;
    let default = ns(rows
        .iter()
        .find(|r| r.batch == swdaq_readout::udp::DEFAULT_BATCH));
    Ok(UdpIntakeResult {
        feds,
        fed_bytes,
        events,
        batched_speedup: one / largest,
        tcp_over_udp: default / tcp.ns_per_fragment,
        tcp,
        rows,
        load_average: load_average(),
    })
}

/// The benchmarks' emulated FEDs: `feds` FEDs of `fed_bytes` (spread an eighth), fault-free,
/// at a fixed 100 kHz.
pub(crate) fn bench_feds(feds: u16, fed_bytes: u32) -> FedSimConfig {
    FedSimConfig {
        feds: FedSimConfig::uniform(0, feds, fed_bytes, fed_bytes / 8),
        trigger_rate_hz: 100e3,
        poisson: false,
        seed: 1,
        faults: Default::default(),
    }
}

fn measure(config: &FedSimConfig, events: u64, batch: usize) -> io::Result<UdpIntakeRow> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let mut emulator = FedEmulator::new(config.clone()).map_err(|e| invalid(e.to_string()))?;
    let mut sources = Vec::new();
    let mut senders = Vec::new();
    for spec in &config.feds {
        let source = UdpSource::bind((std::net::Ipv4Addr::LOCALHOST, 0).into())?
            .with_batch_size(batch)
            .without_waiting()?;
        senders.push(UdpSender::connect(source.local_addr()?)?);
        sources.push(FedSource {
            fed: spec.id,
            source: Box::new(source),
            max_fragment: 16 << 10,
        });
    }
    let wait = Duration::from_secs(1);
    let mut unit =
        Producer::from_sources(0, sources, 1024, wait, 1, TriggerClock::new(Instant::now()))
            .map_err(|e| invalid(e.to_string()))?;
    let (mut event, mut faults) = (FedEvent::default(), Vec::new());
    let (mut taken, mut cpu_ns, mut bytes, mut bad) = (0, 0.0, 0, 0);
    while taken < events {
        let burst = BURST_EVENTS.min(events - taken);
        for _ in 0..burst {
            emulator.next_event(&mut event, &mut faults);
            for ((_, range), sender) in event.fragments.iter().zip(&senders) {
                sender.send(&event.bytes[range.clone()])?;
                bytes += range.len() as u64;
            }
        }
        let start = thread_cpu_ns();
        for _ in 0..burst {
            while unit.not_due_for().is_some() {}
            bad += u64::from(unit.take().1.bad_feds);
        }
        cpu_ns += thread_cpu_ns() - start;
        taken += burst;
    }
    // An idle read brings the kernel's drop counts up to date.
    let _ = unit.not_due_for();
    let fragments = events * config.feds.len() as u64;
    Ok(UdpIntakeRow {
        batch,
        fragments,
        ns_per_fragment: cpu_ns / fragments as f64,
        fragments_per_core_second: fragments as f64 / (cpu_ns / 1e9),
        gbps_per_core: bytes as f64 / cpu_ns,
        kernel_dropped: unit
            .fed_counts()
            .iter()
            .map(|c| c.ingest.kernel_dropped)
            .sum(),
        bad_fragments: bad,
    })
}

fn measure_tcp(config: &FedSimConfig, events: u64, per: usize) -> io::Result<TcpIntakeRow> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let ids: Vec<u16> = config.feds.iter().map(|f| f.id).collect();
    let mut sources = Vec::new();
    let mut addresses = Vec::new();
    for feds in ids.chunks(per.max(1)) {
        let any = (std::net::Ipv4Addr::LOCALHOST, 0).into();
        let links =
            FerolStream::listen(any, feds.to_vec(), 16 << 10, 4096, Duration::from_secs(1))?;
        addresses.push(links[0].address());
        for (fed, link) in feds.iter().zip(links) {
            sources.push(FedSource {
                fed: *fed,
                source: Box::new(link),
                max_fragment: 16 << 10,
            });
        }
    }
    let mut unit = Producer::from_sources(
        0,
        sources,
        1024,
        Duration::from_secs(1),
        1,
        TriggerClock::new(Instant::now()),
    )
    .map_err(|e| invalid(e.to_string()))?;
    let mut emulator = FedEmulator::new(config.clone()).map_err(|e| invalid(e.to_string()))?;
    let (go, bursts) = std::sync::mpsc::channel::<u64>();
    let (written, done) = std::sync::mpsc::channel::<io::Result<u64>>();
    let per = per.max(1);
    let sender = std::thread::spawn(move || {
        let mut streams = addresses
            .iter()
            .map(|a| TcpStream::connect(a).inspect(|s| drop(s.set_nodelay(true))))
            .collect::<io::Result<Vec<_>>>();
        let (mut event, mut faults, mut out) = (FedEvent::default(), Vec::new(), Vec::new());
        while let Ok(burst) = bursts.recv() {
            let result = streams
                .as_mut()
                .map_err(|e| io::Error::new(e.kind(), e.to_string()))
                .and_then(|streams| {
                    let mut bytes = 0;
                    let mut pending = vec![Vec::new(); streams.len()];
                    for _ in 0..burst {
                        emulator.next_event(&mut event, &mut faults);
                        for (index, (fed, range)) in event.fragments.iter().enumerate() {
                            let fragment = &event.bytes[range.clone()];
                            out.clear();
                            encode_ferol_blocks(
                                fragment,
                                *fed,
                                event.event as u32,
                                &mut out,
                                |_, _| {},
                            )
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                            pending[index / per].extend_from_slice(&out);
                            bytes += range.len() as u64;
                        }
                    }
                    for (stream, bytes) in streams.iter_mut().zip(&pending) {
                        stream.write_all(bytes)?;
                    }
                    Ok(bytes)
                });
            if written.send(result).is_err() {
                return;
            }
        }
    });
    let (mut taken, mut cpu_ns, mut bytes, mut bad) = (0, 0.0, 0, 0);
    let result = (|| {
        while taken < events {
            let burst = TCP_BURST_EVENTS.min(events - taken);
            go.send(burst)
                .map_err(|_| invalid("the sender thread ended".into()))?;
            bytes += done.recv_timeout(Duration::from_secs(10)).map_err(|_| {
                invalid("a burst did not fit the connections' buffers in 10 s".into())
            })??;
            let start = thread_cpu_ns();
            for _ in 0..burst {
                while unit.not_due_for().is_some() {}
                bad += u64::from(unit.take().1.bad_feds);
            }
            cpu_ns += thread_cpu_ns() - start;
            taken += burst;
        }
        Ok::<(), io::Error>(())
    })();
    drop(go);
    let _ = sender.join();
    result?;
    let fragments = events * config.feds.len() as u64;
    Ok(TcpIntakeRow {
        feds_per_stream: per,
        fragments,
        ns_per_fragment: cpu_ns / fragments as f64,
        fragments_per_core_second: fragments as f64 / (cpu_ns / 1e9),
        gbps_per_core: bytes as f64 / cpu_ns,
        bad_fragments: bad,
        corrupt: unit
            .fed_counts()
            .iter()
            .map(|c| c.ingest.stream.corrupt())
            .sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fragment_is_taken_good_at_every_batch_size() {
        let result = udp_intake(4, 512, 600, &[1, 32]).unwrap();
        for row in &result.rows {
            assert_eq!(row.fragments, 2400);
            // A loaded host may drop a datagram of a burst (the bench's figures then say so):
            // each drop is one missing fragment, and nothing else is bad.
            assert_eq!(row.bad_fragments, row.kernel_dropped, "{row:?}");
            assert!(row.ns_per_fragment > 0.0);
        }
        assert!(result.batched_speedup.is_finite());
        let tcp = &result.tcp;
        assert_eq!(
            (tcp.fragments, tcp.bad_fragments, tcp.corrupt),
            (2400, 0, 0)
        );
        assert!(result.tcp_over_udp.is_finite());
    }
}

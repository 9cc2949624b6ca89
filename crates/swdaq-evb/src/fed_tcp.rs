//! Emulated FEDs sending over TCP as FEROLs do (`swdaq gen --format fed --tcp`): the FEDs,
//! in configuration order, in streams of `feds_per_stream`, stream `s` connecting to the
//! base address's port + `s` (the mapping `[evb.input] kind = "tcp"` listens on; FEROLs are
//! the TCP clients, the readout unit accepts), each fragment cut into FEROL blocks
//! (`swdaq_format::ferol`) with the FED id and event number taken from its FED header, as a
//! FEROL does. Each level-1 accept at its trigger time, or flat out.
//!
//! FEROL faults: with `ferol_faults` a rate `r`, each fragment that carries no FED fault
//! gets, with probability `r` each, one of the five header corruptions in one of its blocks
//! (chosen at random), recorded as truth: the readout unit counts each once for its FED and
//! loses that fragment. A stream's fragment after a corrupt one is never corrupted: the
//! receiver skips from a corruption to the next fragment that starts well, so two in a row
//! would be one loss to it. Every wait is bounded: the connection (`connect_wait`), each write
//! (a stalled receiver for `connect_wait` fails the send, naming the stream).

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use swdaq_format::fed::FedHeader;
use swdaq_format::ferol::{FEROL_BLOCK_SIZE, FerolProblem, encode_ferol_blocks, ferol_blocks};
use swdaq_readout::udp::{Pacer, port_offset};
use swdaq_sim::fed::{FedConfigError, FedEmulator, FedEvent, FedFault, FedSimConfig};

/// Bytes gathered in a stream before every stream is written: a few dozen blocks, one
/// system call each.
const WRITE_BATCH: usize = 128 << 10;
/// Paced: the sender writes and waits once it is this far ahead of the trigger clock; until
/// then fragments gather (each leaves at most this late).
const FLUSH_AHEAD: Duration = Duration::from_micros(50);

#[derive(Debug, thiserror::Error)]
pub enum FedTcpError {
    #[error(transparent)]
    Config(#[from] FedConfigError),
    #[error("feds_per_stream = {0}: must be at least 1")]
    FedsPerStream(usize),
    #[error("FEROL stream {stream} (FEDs {feds:?}): no connection to {addr}: {source}")]
    Connect {
        stream: usize,
        feds: Vec<u16>,
        addr: String,
        source: std::io::Error,
    },
    #[error("FEROL stream {stream} (FEDs {feds:?}): sending to {addr}: {source}")]
    Send {
        stream: usize,
        feds: Vec<u16>,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A FEROL header corruption the sender injected (truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FerolFault {
    pub event: u64,
    pub fed: u16,
    pub kind: FerolProblem,
    /// The block it is in, from 0.
    pub block: usize,
}

/// What [`send`] sent.
#[derive(Debug, Clone, PartialEq)]
pub struct FedTcpSent {
    pub streams: usize,
    pub fragments: u64,
    /// Bytes on the wire, FEROL headers included.
    pub bytes: u64,
    /// The emulator's faults (a missing fragment is no blocks at all).
    pub faults: Vec<FedFault>,
    pub ferol_faults: Vec<FerolFault>,
    /// From the first send to the last.
    pub seconds: f64,
}

/// How [`send`] sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FedTcpOptions {
    pub feds_per_stream: usize,
    /// Each accept at its trigger time, else as fast as the receivers take them.
    pub paced: bool,
    /// Probability per fragment of each FEROL header corruption.
    pub ferol_faults: f64,
    /// The longest wait for a connection or one write.
    pub connect_wait: Duration,
}

impl Default for FedTcpOptions {
    fn default() -> Self {
        Self {
            feds_per_stream: 1,
            paced: true,
            ferol_faults: 0.0,
            connect_wait: Duration::from_secs(10),
        }
    }
}

struct Stream {
    feds: Vec<u16>,
    addr: SocketAddr,
    socket: TcpStream,
    pending: Vec<u8>,
    /// The last fragment sent carried a FEROL fault.
    faulted: bool,
}

impl Stream {
    fn flush(&mut self, index: usize) -> Result<(), FedTcpError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let sent = self.socket.write_all(&self.pending);
        self.pending.clear();
        sent.map_err(|source| FedTcpError::Send {
            stream: index,
            feds: self.feds.clone(),
            addr: self.addr,
            source,
        })
    }
}

/// Connects to `addr`, retrying while nothing listens there yet, for at most `wait`.
fn connect(addr: SocketAddr, wait: Duration) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + wait;
    loop {
        match TcpStream::connect_timeout(&addr, wait) {
            Ok(socket) => return Ok(socket),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Sends `events` level-1 accepts of every configured FED as FEROL streams to `base` (+
/// stream index), as `options` says.
pub fn send(
    config: FedSimConfig,
    events: u64,
    base: SocketAddr,
    options: FedTcpOptions,
) -> Result<FedTcpSent, FedTcpError> {
    let per = options.feds_per_stream;
    if per == 0 {
        return Err(FedTcpError::FedsPerStream(per));
    }
    let seed = config.seed;
    let mut emulator = FedEmulator::new(config)?;
    let ids: Vec<u16> = emulator.config().feds.iter().map(|f| f.id).collect();
    let mut streams = ids
        .chunks(per)
        .enumerate()
        .map(|(index, feds)| {
            let fail = |source: std::io::Error| FedTcpError::Connect {
                stream: index,
                feds: feds.to_vec(),
                addr: format!("{base} + {index}"),
                source,
            };
            let addr = port_offset(base, index).map_err(fail)?;
            let socket = connect(addr, options.connect_wait).map_err(fail)?;
            socket
                .set_write_timeout(Some(options.connect_wait))
                .and_then(|()| socket.set_nodelay(true))
                .map_err(fail)?;
            Ok(Stream {
                feds: feds.to_vec(),
                addr,
                socket,
                pending: Vec::with_capacity(WRITE_BATCH + FEROL_BLOCK_SIZE * 4),
                faulted: false,
            })
        })
        .collect::<Result<Vec<_>, FedTcpError>>()?;
    // Its own stream of numbers: the emulator's fragments are the same with or without.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xFE50_1000_0000_0000);
    let (mut event, mut faults, mut ferol_faults) = (FedEvent::default(), Vec::new(), Vec::new());
    let (mut fragments, mut bytes) = (0, 0);
    let pacer = Pacer::start_now();
    let started = Instant::now();
    for _ in 0..events {
        let faulty_before = faults.len();
        emulator.next_event(&mut event, &mut faults);
        let due = Duration::from_nanos(event.trigger_ns);
        // Paced: what is gathered goes out before a wait, and only then: at 100 kHz a write
        // per event and stream would cost the sender more than the emulation.
        if options.paced && started + due > Instant::now() + FLUSH_AHEAD {
            for (index, stream) in streams.iter_mut().enumerate() {
                stream.flush(index)?;
            }
            pacer.wait_until(due);
        }
        let has_fault = |fed: u16| faults[faulty_before..].iter().any(|f| f.fed == fed);
        for (fed, range) in &event.fragments {
            let fragment = &event.bytes[range.clone()];
            let index = ids.iter().position(|id| id == fed).unwrap_or(0) / per;
            // As a FEROL: the FED id and event number from the FED header.
            let (fed_id, l1_id) = FedHeader::parse(fragment)
                .map(|h| (h.source_id, h.l1_id))
                .unwrap_or((*fed, event.event as u32));
            let mut fault = None;
            // Never two corrupt fragments back to back on a stream: the receiver, skipping
            // to the next fragment after the first, would take both as one loss.
            let after_fault = std::mem::take(&mut streams[index].faulted);
            if options.ferol_faults > 0.0 && !has_fault(*fed) && !after_fault {
                for kind in FerolProblem::ALL {
                    if fault.is_none() && rng.random_bool(options.ferol_faults.clamp(0.0, 1.0)) {
                        let block = rng.random_range(0..ferol_blocks(fragment.len()));
                        fault = Some(FerolFault {
                            event: event.event,
                            fed: *fed,
                            kind,
                            block,
                        });
                    }
                }
            }
            let stream = &mut streams[index];
            let at = stream.pending.len();
            let encoded = encode_ferol_blocks(
                fragment,
                fed_id,
                l1_id,
                &mut stream.pending,
                |k, h| match fault {
                    Some(f) if f.block == k => corrupt(f.kind, k, h),
                    _ => {}
                },
            );
            // The emulator's fragments are whole words and far below 2048 blocks.
            debug_assert!(encoded.is_ok(), "{encoded:?}");
            if let Some(f) = fault
                && f.kind == FerolProblem::Signature
            {
                stream.pending[at + f.block * FEROL_BLOCK_SIZE] ^= 0xFF;
            }
            stream.faulted = fault.is_some();
            ferol_faults.extend(fault);
            fragments += 1;
            bytes += (stream.pending.len() - at) as u64;
            // All streams go out together: one stream gathering while another's write
            // blocks would hold its FEDs back behind the others of their readout unit.
            if stream.pending.len() >= WRITE_BATCH {
                for (index, stream) in streams.iter_mut().enumerate() {
                    stream.flush(index)?;
                }
            }
        }
    }
    for (index, stream) in streams.iter_mut().enumerate() {
        stream.flush(index)?;
    }
    Ok(FedTcpSent {
        streams: streams.len(),
        fragments,
        bytes,
        faults,
        ferol_faults,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Block `k`'s header corrupted as `kind` (the signature is spoiled in the bytes).
fn corrupt(kind: FerolProblem, k: usize, h: &mut swdaq_format::ferol::FerolHeader) {
    match kind {
        FerolProblem::Signature => {}
        // A FED id no stream carries (FED ids are below 2048 in swdaq's configurations).
        FerolProblem::FedId => h.fed_id ^= 0x800,
        FerolProblem::EventNumber => h.event ^= 1,
        FerolProblem::PacketOrder => h.packet = k as u16 + 1,
        FerolProblem::Length => h.payload_bytes = swdaq_format::ferol::FEROL_LENGTH_FIELD_MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ferol_tcp::FerolStream;
    use std::collections::BTreeMap;
    use swdaq_readout::source::{FrameSource, Poll};
    use swdaq_sim::fed::{FedFaultRates, write_fed_files};

    fn config() -> FedSimConfig {
        FedSimConfig {
            feds: FedSimConfig::uniform(7, 4, 6000, 2000),
            trigger_rate_hz: 20_000.0,
            poisson: true,
            seed: 3,
            faults: FedFaultRates {
                missing: 0.05,
                bad_crc: 0.05,
                stops: vec![(9, 30)],
                ..Default::default()
            },
        }
    }

    /// Four FEDs in two streams: each FED's link receives exactly the records its raw file
    /// holds, less the fragments with a FEROL fault, each counted once for its FED.
    #[test]
    fn each_fed_receives_its_file_less_what_the_ferol_faults_cost() {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let first =
            FerolStream::listen(any, vec![7, 8], 1 << 16, 4096, Duration::from_secs(1)).unwrap();
        let base = first[0].address();
        let second = port_offset(base, 1).and_then(|a| {
            FerolStream::listen(a, vec![9, 10], 1 << 16, 4096, Duration::from_secs(1))
        });
        let Ok(second) = second else {
            return; // the next port is taken: nothing to test on this machine now
        };
        let mut links: Vec<_> = first.into_iter().chain(second).collect();
        let events = 200;
        let options = FedTcpOptions {
            feds_per_stream: 2,
            paced: false,
            ferol_faults: 0.02,
            ..Default::default()
        };
        let sender = std::thread::spawn(move || send(config(), events, base, options).unwrap());
        let mut got: BTreeMap<u16, Vec<Vec<u8>>> = BTreeMap::new();
        let mut slot = vec![0u8; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut idle = true;
            for (link, fed) in links.iter_mut().zip([7u16, 8, 9, 10]) {
                if let Poll::Frame(len) = link.next_frame(&mut slot).unwrap() {
                    got.entry(fed).or_default().push(slot[..len].to_vec());
                    idle = false;
                }
            }
            if sender.is_finished()
                && idle
                && links.iter().all(|l| l.stream_counts().unwrap().closed == 1)
            {
                break;
            }
            assert!(Instant::now() < deadline, "streams never finished");
        }
        let sent = sender.join().unwrap();
        assert!(sent.ferol_faults.len() > 5, "{}", sent.ferol_faults.len());
        let dir = tempfile::tempdir().unwrap();
        let written = write_fed_files(config(), events, 1, dir.path()).unwrap();
        assert_eq!(written.faults, sent.faults);
        for (index, fed) in [7u16, 8, 9, 10].into_iter().enumerate() {
            let file = std::fs::File::open(swdaq_sim::fed::fed_raw_path(dir.path(), fed)).unwrap();
            let mut reader =
                swdaq_format::rawfile::RawFileReader::new(std::io::BufReader::new(file)).unwrap();
            let mut want = Vec::new();
            let mut record = vec![0u8; 1 << 16];
            while let Some(len) = reader.read_frame_into(&mut record).unwrap() {
                want.push(record[..len].to_vec());
            }
            let lost: Vec<usize> = sent
                .ferol_faults
                .iter()
                .filter(|f| f.fed == fed)
                .map(|f| {
                    want.iter()
                        .position(|w| FedHeader::parse(w).unwrap().l1_id == f.event as u32)
                        .unwrap()
                })
                .collect();
            let kept: Vec<Vec<u8>> = want
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !lost.contains(i))
                .map(|(_, w)| w)
                .collect();
            assert_eq!(
                got.get(&fed).cloned().unwrap_or_default(),
                kept,
                "FED {fed}"
            );
            let counts = links[index].stream_counts().unwrap();
            for kind in FerolProblem::ALL {
                let want = sent
                    .ferol_faults
                    .iter()
                    .filter(|f| f.fed == fed && f.kind == kind)
                    .count() as u64;
                let got = match kind {
                    FerolProblem::Signature => counts.signature,
                    FerolProblem::FedId => counts.fed_id,
                    FerolProblem::EventNumber => counts.event_number,
                    FerolProblem::PacketOrder => counts.packet_order,
                    FerolProblem::Length => counts.length,
                };
                assert_eq!(got, want, "FED {fed} {}", kind.name());
            }
            assert_eq!((counts.connections, counts.cut, counts.stalled), (1, 0, 0));
        }
    }
}

//! Emulated FEDs sending over UDP: one fragment per datagram, the FED that is `i`-th in the
//! configuration to the base address's port + `i` (`swdaq_readout::udp::port_offset`, the
//! mapping `[evb.input] kind = "udp"` listens on), each level-1 accept at its trigger time
//! (the emulator's, fixed or Poisson) or flat out. What `swdaq gen --format fed --udp` runs.

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use swdaq_readout::udp::{Pacer, UdpSender, port_offset};
use swdaq_sim::fed::{FedConfigError, FedEmulator, FedEvent, FedFault, FedSimConfig};

#[derive(Debug, thiserror::Error)]
pub enum FedUdpError {
    #[error(transparent)]
    Config(#[from] FedConfigError),
    #[error("FED {fed}: no UDP destination {addr}: {source}")]
    Connect {
        fed: u16,
        addr: String,
        source: std::io::Error,
    },
    #[error("FED {fed}: sending to {addr}: {source}")]
    Send {
        fed: u16,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What [`send`] sent.
#[derive(Debug, Clone, PartialEq)]
pub struct FedUdpSent {
    pub datagrams: u64,
    pub bytes: u64,
    /// Faults injected, as truth (a missing fragment is no datagram).
    pub faults: Vec<FedFault>,
    /// From the first send to the last.
    pub seconds: f64,
}

/// Sends `events` level-1 accepts of every configured FED to `base` (+ FED index); `paced`:
/// each at its trigger time, else as fast as the sockets take them.
pub fn send(
    config: FedSimConfig,
    events: u64,
    base: SocketAddr,
    paced: bool,
) -> Result<FedUdpSent, FedUdpError> {
    let mut emulator = FedEmulator::new(config)?;
    let senders = emulator
        .config()
        .feds
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let connect = |addr: SocketAddr| UdpSender::connect(addr).map(|s| (spec.id, addr, s));
            port_offset(base, index)
                .and_then(connect)
                .map_err(|source| FedUdpError::Connect {
                    fed: spec.id,
                    addr: format!("{base} + {index}"),
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (mut event, mut faults) = (FedEvent::default(), Vec::new());
    let (mut datagrams, mut bytes) = (0, 0);
    let pacer = Pacer::start_now();
    let started = Instant::now();
    for _ in 0..events {
        emulator.next_event(&mut event, &mut faults);
        if paced {
            pacer.wait_until(Duration::from_nanos(event.trigger_ns));
        }
        // Fragments come in configuration order, so one pass over the senders finds each.
        let mut sent = event.fragments.iter().peekable();
        for (fed, addr, sender) in &senders {
            if let Some((_, range)) = sent.next_if(|(id, _)| id == fed) {
                sender
                    .send(&event.bytes[range.clone()])
                    .map_err(|source| FedUdpError::Send {
                        fed: *fed,
                        addr: *addr,
                        source,
                    })?;
                datagrams += 1;
                bytes += range.len() as u64;
            }
        }
    }
    Ok(FedUdpSent {
        datagrams,
        bytes,
        faults,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use swdaq_sim::fed::{FedFaultKind, FedFaultRates, write_fed_files};

    fn config() -> FedSimConfig {
        FedSimConfig {
            feds: FedSimConfig::uniform(7, 3, 200, 40),
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

    /// Each FED's datagrams on its own port (base + its index), in order, are exactly the
    /// records its raw file would hold, with the same truth; paced, the last accept is not
    /// sent before its trigger time.
    #[test]
    fn each_fed_sends_its_file_records_to_its_own_port() {
        let sockets: Vec<UdpSocket> = loop {
            let first = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = first.local_addr().unwrap().port();
            let rest: Result<Vec<_>, _> = (1..3)
                .map(|k| UdpSocket::bind(("127.0.0.1", port.wrapping_add(k))))
                .collect();
            if let Ok(rest) = rest {
                break std::iter::once(first).chain(rest).collect();
            }
        };
        for s in &sockets {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let events = 60;
        let base = sockets[0].local_addr().unwrap();
        let sent = send(config(), events, base, true).unwrap();
        let last_trigger_ns = {
            let mut emulator = FedEmulator::new(config()).unwrap();
            let (mut e, mut f) = (FedEvent::default(), Vec::new());
            (0..events).for_each(|_| emulator.next_event(&mut e, &mut f));
            e.trigger_ns
        };
        assert!(sent.seconds >= last_trigger_ns as f64 * 1e-9 - 1e-3);

        let dir = tempfile::tempdir().unwrap();
        let files = write_fed_files(config(), events, 1, dir.path()).unwrap();
        assert_eq!(sent.faults, files.faults);
        assert!(sent.faults.iter().any(|f| f.kind == FedFaultKind::Stopped));
        let mut total = 0;
        for ((_, path, count), socket) in files.files.iter().zip(&sockets) {
            let file = std::fs::File::open(path).unwrap();
            let mut reader = swdaq_format::rawfile::RawFileReader::new(file).unwrap();
            let (mut record, mut datagram) = (Vec::new(), vec![0u8; 4096]);
            for _ in 0..*count {
                assert!(reader.next_frame(&mut record).unwrap());
                let len = socket.recv(&mut datagram).unwrap();
                assert_eq!(&datagram[..len], &record[..]);
            }
            total += count;
        }
        assert_eq!(sent.datagrams, total);
    }

    #[test]
    fn a_port_beyond_the_range_is_an_error_naming_the_fed() {
        let base: SocketAddr = "127.0.0.1:65534".parse().unwrap();
        let error = send(config(), 1, base, false).unwrap_err().to_string();
        assert!(error.contains("FED 9"), "{error}");
    }
}

//! Opens a readout unit's FED input as `[evb.input]` says: its emulator, each FED's raw file
//! (its frame type checked, its largest fragment sizing the FED's buffer) or each FED's UDP
//! socket, its datagrams FED fragments or, with `[evb.input.decoder]`, a detector's own
//! (`decoded`), or each FEROL stream's TCP port (`ferol_tcp`). A file or address that cannot be used is an error that names it.

use crate::config::{EvbConfig, FedInputKind};
use crate::decoded::{DecoderConfigError, fed_source};
use crate::ferol_tcp::FerolStream;
use crate::pause::TriggerClock;
use crate::producer::{FedSource, Producer, ProducerError};
use std::io::BufReader;
use std::net::SocketAddr;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use swdaq_format::fed::FED_RAW_FILE_TYPE;
use swdaq_format::fed_detector::DetectorWords;
use swdaq_format::rawfile::RawFileError;
use swdaq_readout::source::FileSource;
use swdaq_readout::udp::{UdpSource, port_offset};
use swdaq_sim::fed::fed_raw_path;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot open FED file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("FED file {path}: {source}")]
    Header { path: PathBuf, source: RawFileError },
    #[error("{path} is not a FED raw file (frame type {frame_type:#x})")]
    NotFed { path: PathBuf, frame_type: u32 },
    #[error("cannot listen for FED {fed} on {addr}: {source}")]
    Bind {
        fed: u16,
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    Decoder(#[from] DecoderConfigError),
}

/// Readout unit `ru`'s input, on the run's trigger `clock`.
pub fn open(config: &EvbConfig, ru: usize, clock: TriggerClock) -> Result<Producer, InputError> {
    let input = &config.input;
    let index = ru as u16;
    let sources = match input.kind {
        FedInputKind::Emulator => {
            return Ok(Producer::new(
                index,
                config.fed_sim(ru),
                clock,
                config.pacing(),
            )?);
        }
        FedInputKind::File => config.rus[ru]
            .iter()
            .map(|spec| open_file(fed_raw_path(&input.directory, spec.id), spec.id))
            .collect::<Result<Vec<_>, _>>()?,
        FedInputKind::Tcp => open_tcp(config, ru)?,
        FedInputKind::Udp => {
            let base = input
                .udp_address
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
            let before: usize = config.rus[..ru].iter().map(Vec::len).sum();
            config.rus[ru]
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let socket = port_offset(base, before + i)
                        .and_then(UdpSource::bind)
                        .and_then(|s| s.with_batch_size(input.udp_batch).without_waiting())
                        .map_err(|source| InputError::Bind {
                            fed: spec.id,
                            addr: format!("{base} + {}", before + i),
                            source,
                        })?;
                    let Some(decoder) = &input.decoder else {
                        return Ok(FedSource {
                            fed: spec.id,
                            source: Box::new(socket),
                            max_fragment: input.max_fragment_bytes,
                        });
                    };
                    let source =
                        fed_source(spec.id, Box::new(socket), input.max_fragment_bytes, decoder)?;
                    Ok(FedSource {
                        fed: spec.id,
                        source: Box::new(source),
                        // A datagram's payload in a FED fragment with the detector's words.
                        max_fragment: DetectorWords::fragment_size(input.max_fragment_bytes),
                    })
                })
                .collect::<Result<Vec<_>, InputError>>()?
        }
    };
    Ok(Producer::from_sources(
        index,
        sources,
        input.buffer_fragments,
        input.stop_wait,
        input.first_event,
        clock,
    )?)
}

/// Readout unit `ru`'s FEROL streams: its FEDs in streams of `feds_per_stream`, stream `s`
/// (counted over every readout unit) listening on `tcp_address`'s port + `s`.
fn open_tcp(config: &EvbConfig, ru: usize) -> Result<Vec<FedSource>, InputError> {
    let input = &config.input;
    let base = input
        .tcp_address
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    let per = input.feds_per_stream.max(1);
    let before: usize = config.rus[..ru].iter().map(|feds| feds.len() / per).sum();
    let mut sources = Vec::new();
    for (s, feds) in config.rus[ru].chunks(per).enumerate() {
        let ids: Vec<u16> = feds.iter().map(|spec| spec.id).collect();
        let listening = port_offset(base, before + s).and_then(|address| {
            FerolStream::listen(
                address,
                ids.clone(),
                input.max_fragment_bytes,
                input.buffer_fragments,
                input.stop_wait,
            )
        });
        let links = listening.map_err(|source| InputError::Bind {
            fed: ids[0],
            addr: format!("{base} + {} (TCP, FEDs {ids:?})", before + s),
            source,
        })?;
        sources.extend(ids.iter().zip(links).map(|(&fed, link)| FedSource {
            fed,
            source: Box::new(link),
            max_fragment: input.max_fragment_bytes,
        }));
    }
    Ok(sources)
}

fn open_file(path: PathBuf, fed: u16) -> Result<FedSource, InputError> {
    let file =
        swdaq_format::input_file::open_regular(&path).map_err(|source| InputError::Open {
            path: path.clone(),
            source,
        })?;
    let source = FileSource::new(BufReader::new(file)).map_err(|source| InputError::Header {
        path: path.clone(),
        source,
    })?;
    let header = source.header();
    if header.frame_type != FED_RAW_FILE_TYPE {
        return Err(InputError::NotFed {
            frame_type: header.frame_type.0,
            path,
        });
    }
    Ok(FedSource {
        fed,
        max_fragment: header.frame_size as usize,
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FedInputConfig;
    use std::time::Instant;
    use swdaq_format::rawfile::{RawFileHeader, RawFileWriter};
    use swdaq_format::{FragmentType, SourceId};
    use swdaq_sim::fed::{FedSimConfig, write_fed_files};

    fn file_config(dir: &Path) -> EvbConfig {
        EvbConfig {
            rus: vec![FedSimConfig::uniform(0, 2, 256, 0)],
            input: FedInputConfig {
                kind: FedInputKind::File,
                directory: dir.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_or_foreign_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let config = file_config(dir.path());
        let error = open(&config, 0, TriggerClock::new(Instant::now()))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("fed0.swraw"), "{error}");
        for fed in [0, 1] {
            let header = RawFileHeader {
                frame_type: FragmentType(0x1234),
                frame_size: 64,
                source_id: SourceId::readout(fed),
                run_number: 1,
                first_timestamp: 0,
                created_unix_ns: 0,
            };
            let file = std::fs::File::create(fed_raw_path(dir.path(), fed as u16)).unwrap();
            RawFileWriter::new(file, &header).unwrap().finish().unwrap();
        }
        let error = open(&config, 0, TriggerClock::new(Instant::now()))
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("fed0.swraw") && error.contains("not a FED raw file"),
            "{error}"
        );
    }

    /// The generator's files read back into super-fragments of every event, then the input
    /// is exhausted.
    #[test]
    fn generated_files_are_read_to_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let config = file_config(dir.path());
        write_fed_files(config.fed_sim(0), 50, 1, dir.path()).unwrap();
        let mut producer = open(&config, 0, TriggerClock::new(Instant::now())).unwrap();
        for event in 1..=50 {
            assert_eq!(producer.not_due_for(), None);
            let (_, sf) = producer.take();
            assert_eq!((sf.event, sf.bad_feds), (event, 0));
        }
        assert!(producer.exhausted());
    }
}

//! `swdaq gen`: write emulated link data to raw files, with the ground truth beside them.

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;
use swdaq_format::SourceId;
use swdaq_format::rawfile::{RawFileHeader, RawFileWriter, link_path};
use swdaq_readout::udp::{Pacer, port_offset};
use swdaq_sim::{Detector, FrameFormat, SimConfig, truth};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of data per link.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Number of links (FELIX cards for `--format felix`, FEDs for `--format fed`).
    #[arg(long, default_value_t = 2)]
    links: u32,
    /// What to emulate.
    #[arg(long, value_enum, default_value_t = Format::Wibeth)]
    format: Format,
    /// Emulator seed (overrides the config file's).
    #[arg(long)]
    seed: Option<u64>,
    /// Emulator configuration (TOML: `SimConfig` fields, `FelixConfig` fields for
    /// `--format felix`, `FedSimConfig` fields for `--format fed`); defaults otherwise.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory for the raw files and the truth.
    #[arg(long, default_value = "swdaq-data")]
    out: PathBuf,
    /// Run number written into the files' headers.
    #[arg(long, default_value_t = 1)]
    run: u32,
    /// Timestamp of the first frame, in clock ticks.
    #[arg(long, default_value_t = 0)]
    start_timestamp: u64,
    /// Send the frames as UDP datagrams instead of writing raw files: link K (FED K, the
    /// K-th in the configuration) goes to this address's port + K, paced at the link's
    /// real-time rate (FEDs: at each level-1 accept's trigger time). The truth is still written.
    #[arg(long)]
    udp: Option<std::net::SocketAddr>,
    /// With `--udp` or `--tcp`: send as fast as the receivers take the data, not paced.
    #[arg(long)]
    flat_out: bool,
    /// `--format felix`: serve the cards as FELIX servers instead of writing raw files: card K
    /// listens on this address's port + K, waits until every e-link (and the TTC-to-host
    /// e-link) has a subscriber, then publishes its blocks at the L1 accept rate. The truth
    /// is written before each server ends its publication. `--format fed`: send the FEDs as
    /// FEROLs do, their fragments in FEROL blocks over TCP, the FEDs in configuration order
    /// in streams of `--feds-per-stream`, stream S connecting to this address's port + S
    /// (where `[evb.input] kind = "tcp"` listens).
    #[arg(long, conflicts_with_all = ["udp", "records"])]
    tcp: Option<std::net::SocketAddr>,
    /// `--format fed --tcp`: FEDs one FEROL stream carries.
    #[arg(long, default_value_t = 1)]
    feds_per_stream: usize,
    /// `--format fed --tcp`: probability per fragment of each FEROL header corruption
    /// (signature, FED id, event number, packet order, length), written as truth to
    /// `ferol_faults.csv`.
    #[arg(long, default_value_t = 0.0)]
    ferol_faults: f64,
    /// `--format felix`: FELIX FULL mode (as `mode = "full"` in the configuration): one chunk
    /// per link per L1 accept in larger blocks with 32-bit trailers (`block_kib`, default 4).
    /// Files only for now (not with `--tcp`).
    #[arg(long)]
    full_mode: bool,
    /// `--format felix`: L1 accepts per second of every card (`--seconds` of them are made).
    #[arg(long, default_value_t = swdaq_sim::felix::L1_RATE_HZ)]
    l1a_rate: f64,
    /// With `--tcp`: seconds a server waits for its subscribers before it gives up.
    #[arg(long, default_value_t = 60.0)]
    wait_subscribers: f64,
    /// Also package the data as this many consecutive trigger records (every link's frames
    /// of each window as one fragment) in an HDF5 file in the output directory.
    #[arg(long, conflicts_with = "udp")]
    records: Option<u64>,
}

/// Where a link's frames go.
enum Sink {
    File(RawFileWriter<BufWriter<File>>, PathBuf),
    /// The sender, and the pacer with the link's frame rate (`None`: flat out).
    Udp(swdaq_readout::udp::UdpSender, Option<(Pacer, f64)>),
}

impl Sink {
    fn send(&mut self, frame: &[u8], index: u64) -> anyhow::Result<()> {
        match self {
            Sink::File(writer, path) => writer
                .write_frame(frame)
                .with_context(|| format!("writing {}", path.display())),
            Sink::Udp(sender, pace) => {
                if let Some((pacer, rate)) = pace {
                    pacer.wait_until(Duration::from_secs_f64(index as f64 / *rate));
                }
                sender.send(frame).context("sending a UDP datagram")
            }
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        if let Sink::File(writer, path) = self {
            writer
                .finish()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// DUNE WIBEth links (62.5 MHz timestamps).
    Wibeth,
    /// ProtoDUNE WIB links (50 MHz timestamps).
    Protowib,
    /// FELIX cards: to-host blocks of e-link chunks at 100 kHz (GBT mode: 1 KiB blocks;
    /// with `--full-mode`, FULL mode).
    Felix,
    /// CMS FEDs: one fragment per level-1 accept, each FED to its own file.
    Fed,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.seconds > 0.0 && args.seconds.is_finite(),
        "--seconds must be positive"
    );
    anyhow::ensure!(args.links > 0, "--links must be at least 1");
    let format = match args.format {
        Format::Wibeth => FrameFormat::WibEth,
        Format::Protowib => FrameFormat::ProtoWib,
        Format::Felix => return run_felix(args),
        Format::Fed => return run_fed(args),
    };
    let mut config = match &args.config {
        Some(path) => read_config::<SimConfig>(path)?,
        None => SimConfig::default(),
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    let detector = Detector::new(config)?;
    let frames = (args.seconds * format.clock_hz() / format.ticks_per_frame() as f64).ceil() as u64;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;

    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template(
        "link {prefix:>3} [{bar:40}] {pos}/{len} frames {per_sec} eta {eta}",
    )
    .expect("valid template")
    .progress_chars("=> ");
    let results: Vec<anyhow::Result<_>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.links)
            .map(|link| {
                let bar = bars.add(
                    ProgressBar::new(frames)
                        .with_style(style.clone())
                        .with_prefix(link.to_string()),
                );
                let detector = &detector;
                s.spawn(move || write_link(detector, link, format, frames, args, &bar))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("generator thread"))
            .collect()
    });
    let (mut pulses, mut faults) = (Vec::new(), Vec::new());
    for r in results {
        let (p, f) = r?;
        pulses.extend(p);
        faults.extend(f);
    }
    if let Some(records) = args.records {
        let file = package_records(args, format, frames, records)?;
        println!("wrote {records} trigger records to {}", file.display());
    }
    truth::write_csv(&args.out.join("truth_pulses.csv"), &pulses)?;
    truth::write_csv(&args.out.join("truth_faults.csv"), &faults)?;
    let destination = match args.udp {
        Some(addr) => format!("UDP {addr} (+ link number)"),
        None => args.out.display().to_string(),
    };
    println!(
        "sent {} links x {frames} frames to {destination}, truth in {} ({} true pulses, {} injected faults)",
        args.links,
        args.out.display(),
        pulses.len(),
        faults.len()
    );
    Ok(())
}

/// FELIX cards: card K's blocks (one raw-file record per block) to `card<K>.swraw`, or with
/// `--tcp` published by card K's FELIX server; its injected faults to `card<K>_faults.csv`.
/// Every card sends its L1 accepts on its TTC-to-host e-link: a SW ROD fed from these files
/// or servers learns them there.
fn run_felix(args: &Args) -> anyhow::Result<()> {
    use swdaq_sim::felix::{FelixCard, FelixConfig, FelixMode};
    anyhow::ensure!(
        args.udp.is_none() && args.records.is_none(),
        "--udp and --records are for the TPC and FED formats (FELIX cards: --tcp)"
    );
    anyhow::ensure!(
        args.l1a_rate > 0.0 && args.l1a_rate.is_finite(),
        "--l1a-rate must be positive"
    );
    anyhow::ensure!(
        args.tcp.is_some() || !args.flat_out,
        "--flat-out is for --udp and --tcp"
    );
    let mut config = match &args.config {
        Some(path) => read_config::<FelixConfig>(path)?,
        None => FelixConfig::default(),
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if args.full_mode {
        config.mode = FelixMode::Full;
    }
    let layout = config.layout()?;
    config.ttc_to_host = true;
    let l1as = (args.seconds * args.l1a_rate).ceil() as u64;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let cards = u16::try_from(args.links).context("--links: at most 65535 FELIX cards")?;
    let card_config = |card: u16| FelixConfig {
        seed: config.seed.wrapping_add(u64::from(card)),
        ..config.clone()
    };
    if let Some(base) = args.tcp {
        return serve_felix(args, base, cards, l1as, card_config);
    }
    let mut faults = 0;
    for card in 0..cards {
        let mut emulator = FelixCard::new(card_config(card))?;
        let path = swdaq_sim::felix::card_raw_path(&args.out, card);
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let header = RawFileHeader {
            frame_type: swdaq_format::felix::RAW_FILE_TYPE,
            frame_size: layout.block_size() as u32,
            source_id: SourceId::readout(u32::from(card)),
            run_number: args.run,
            first_timestamp: 0,
            created_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        let mut writer = RawFileWriter::new(BufWriter::with_capacity(8 << 20, file), &header)?;
        let mut blocks = Vec::new();
        for n in 0..=l1as {
            if n < l1as {
                emulator.l1_accept(&mut blocks);
            } else {
                emulator.flush(&mut blocks);
            }
            for block in blocks.chunks(layout.block_size()) {
                writer
                    .write_frame(block)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            blocks.clear();
        }
        writer
            .finish()
            .with_context(|| format!("writing {}", path.display()))?;
        truth::write_csv(
            &swdaq_sim::felix::card_truth_path(&args.out, card),
            emulator.faults(),
        )?;
        faults += emulator.faults().len();
    }
    println!(
        "wrote {} FELIX cards ({}) x {l1as} L1 accepts x {} {} (and the TTC-to-host e-link) to {} ({faults} injected faults)",
        args.links,
        if layout.is_full_mode() {
            format!("FULL mode, {} KiB blocks", layout.block_size() / 1024)
        } else {
            "GBT mode".to_string()
        },
        config.elinks,
        if layout.is_full_mode() {
            "links"
        } else {
            "e-links"
        },
        args.out.display()
    );
    Ok(())
}

/// `--format felix --tcp`: one FELIX server per card, each on its own thread and port.
fn serve_felix(
    args: &Args,
    base: std::net::SocketAddr,
    cards: u16,
    l1as: u64,
    card_config: impl Fn(u16) -> swdaq_sim::felix::FelixConfig + Sync,
) -> anyhow::Result<()> {
    use swdaq_swrod::net::server::{ServerConfig, publish};
    let listeners = (0..cards)
        .map(|card| {
            let addr = port_offset(base, usize::from(card))?;
            std::net::TcpListener::bind(addr)
                .with_context(|| format!("card {card}: cannot listen on {addr}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!(
        "{cards} FELIX servers on {base} (+ card), waiting up to {} s for their subscribers",
        args.wait_subscribers
    );
    let results: Vec<anyhow::Result<_>> = std::thread::scope(|scope| {
        let handles: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(card, listener)| {
                let card = card as u16;
                let config = ServerConfig {
                    card,
                    felix: card_config(card),
                    l1as,
                    rate_hz: if args.flat_out { 0.0 } else { args.l1a_rate },
                    wait_for_subscribers: Duration::from_secs_f64(args.wait_subscribers),
                };
                let truth = swdaq_sim::felix::card_truth_path(&args.out, card);
                scope.spawn(move || {
                    publish(listener, &config, |faults| {
                        truth::write_csv(&truth, faults).map_err(std::io::Error::other)
                    })
                    .map_err(anyhow::Error::from)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("FELIX server thread"))
            .collect()
    });
    for r in results {
        let p = r?;
        println!(
            "card {}: {} L1 accepts, {} blocks ({} sent in {} messages, {} with no subscriber) in {:.2} s, at most {:.1} ms behind the L1A clock; {} subscriptions, {} refused, {} dropped; {} injected faults",
            p.card,
            p.l1as,
            p.blocks,
            p.blocks_sent,
            p.messages,
            p.blocks_unsubscribed,
            p.seconds,
            p.max_lag_ms,
            p.subscriptions,
            p.refused,
            p.disconnects,
            p.faults.len()
        );
    }
    Ok(())
}

/// FEDs: FED K's fragments (one raw-file record each) to `fed<K>.swraw`, or with `--udp`
/// one datagram each to the K-th port, the injected faults to `fed_faults.csv`. Without
/// `--config`, `--links` FEDs numbered from 0 with the event builder's default sizes, rate
/// and seed.
fn run_fed(args: &Args) -> anyhow::Result<()> {
    use swdaq_sim::fed::{FedSimConfig, write_fed_files};
    anyhow::ensure!(args.records.is_none(), "--records is for the TPC formats");
    let mut config = match &args.config {
        Some(path) => read_config::<FedSimConfig>(path)?,
        None => {
            let evb = swdaq_evb::EvbConfig::default();
            let spec = evb.rus[0][0];
            let links = u16::try_from(args.links).context("--links: at most 65535 FEDs")?;
            FedSimConfig {
                feds: FedSimConfig::uniform(0, links, spec.mean_bytes, spec.spread_bytes),
                ..evb.fed_sim(0)
            }
        }
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    let events = (args.seconds * config.trigger_rate_hz).ceil() as u64;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let feds = config.feds.len();
    if let Some(base) = args.tcp {
        anyhow::ensure!(
            (0.0..=0.2).contains(&args.ferol_faults),
            "--ferol-faults: a probability of at most 0.2"
        );
        let options = swdaq_evb::fed_tcp::FedTcpOptions {
            feds_per_stream: args.feds_per_stream,
            paced: !args.flat_out,
            ferol_faults: args.ferol_faults,
            ..Default::default()
        };
        let sent = swdaq_evb::fed_tcp::send(config, events, base, options)?;
        truth::write_csv(&args.out.join("fed_faults.csv"), &sent.faults)?;
        let mut ferol = String::from("event,fed,kind,block\n");
        for f in &sent.ferol_faults {
            ferol += &format!("{},{},{},{}\n", f.event, f.fed, f.kind.name(), f.block);
        }
        let ferol_path = args.out.join("ferol_faults.csv");
        std::fs::write(&ferol_path, ferol)
            .with_context(|| format!("writing {}", ferol_path.display()))?;
        println!(
            "sent {feds} FEDs x {events} L1 accepts as {} FEROL streams to TCP {base} (+ stream index): \
             {} fragments, {:.1} MB in {:.3} s ({:.0} fragments/s), truth in {} ({} injected faults, \
             {} FEROL faults)",
            sent.streams,
            sent.fragments,
            sent.bytes as f64 / 1e6,
            sent.seconds,
            sent.fragments as f64 / sent.seconds,
            args.out.display(),
            sent.faults.len(),
            sent.ferol_faults.len()
        );
        return Ok(());
    }
    if let Some(base) = args.udp {
        let sent = swdaq_evb::fed_udp::send(config, events, base, !args.flat_out)?;
        truth::write_csv(&args.out.join("fed_faults.csv"), &sent.faults)?;
        println!(
            "sent {feds} FEDs x {events} L1 accepts to UDP {base} (+ FED index): {} datagrams, \
             {:.1} MB in {:.3} s ({:.0} datagrams/s), truth in {} ({} injected faults)",
            sent.datagrams,
            sent.bytes as f64 / 1e6,
            sent.seconds,
            sent.datagrams as f64 / sent.seconds,
            args.out.display(),
            sent.faults.len()
        );
        return Ok(());
    }
    let written = write_fed_files(config, events, args.run, &args.out)?;
    truth::write_csv(&args.out.join("fed_faults.csv"), &written.faults)?;
    println!(
        "wrote {feds} FEDs x {events} L1 accepts to {} ({} injected faults)",
        args.out.display(),
        written.faults.len()
    );
    Ok(())
}

/// A generator configuration from a TOML file, errors naming the file.
fn read_config<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn write_link(
    detector: &Detector,
    link: u32,
    format: FrameFormat,
    frames: u64,
    args: &Args,
    bar: &ProgressBar,
) -> anyhow::Result<(Vec<truth::TruePulse>, Vec<truth::InjectedFault>)> {
    let mut sink = match args.udp {
        Some(base) => {
            let addr = port_offset(base, link as usize)?;
            let sender = swdaq_readout::udp::UdpSender::connect(addr)
                .with_context(|| format!("UDP to {addr}"))?;
            let rate = format.clock_hz() / format.ticks_per_frame() as f64;
            Sink::Udp(sender, (!args.flat_out).then(|| (Pacer::start_now(), rate)))
        }
        None => {
            let path = link_path(&args.out, link);
            let file =
                File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            let header = RawFileHeader {
                frame_type: format.fragment_type(),
                frame_size: format.frame_size() as u32,
                source_id: SourceId::readout(link),
                run_number: args.run,
                first_timestamp: args.start_timestamp,
                created_unix_ns: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            };
            Sink::File(
                RawFileWriter::new(BufWriter::with_capacity(8 << 20, file), &header)?,
                path,
            )
        }
    };
    let mut sim = detector.link(link, format, args.start_timestamp);
    let mut buf = vec![0u8; format.frame_size()];
    for n in 0..frames {
        let info = sim.next_frame(&mut buf);
        if info.len > 0 {
            sink.send(&buf[..info.len], n)?;
        }
        if n % 1024 == 0 {
            bar.set_position(n);
        }
    }
    sink.finish()?;
    bar.finish();
    Ok((sim.drain_truth(), sim.drain_faults()))
}

/// Cuts the links' raw files into `records` consecutive windows and writes each window as one
/// trigger record (one fragment per link) to an HDF5 file; returns its path.
fn package_records(
    args: &Args,
    format: FrameFormat,
    frames: u64,
    records: u64,
) -> anyhow::Result<PathBuf> {
    use swdaq_format::rawfile::RawFileReader;
    use swdaq_format::{
        ComponentRequest, Fragment, FragmentHeader, Subsystem, TriggerRecord, TriggerRecordHeader,
    };
    anyhow::ensure!(
        records > 0 && records <= frames,
        "--records must be between 1 and the number of frames ({frames})"
    );
    let per_record = frames / records;
    let ticks = format.ticks_per_frame();
    let mut readers = (0..args.links)
        .map(|link| {
            let path = link_path(&args.out, link);
            let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
            Ok(RawFileReader::new(std::io::BufReader::new(file))?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = swdaq_store::StoreConfig {
        directory: args.out.clone(),
        run_number: args.run,
        max_records_per_file: records,
        min_free_bytes: 0,
        ..Default::default()
    };
    let mut writer = swdaq_store::RecordFileWriter::new(config)?;
    let mut frame = Vec::new();
    for k in 0..records {
        let begin = args.start_timestamp + k * per_record * ticks;
        let end = begin + per_record * ticks;
        let trigger_number = k + 1;
        let mut fragments = Vec::new();
        for (link, reader) in readers.iter_mut().enumerate() {
            let mut payload = Vec::with_capacity(per_record as usize * format.frame_size());
            for _ in 0..per_record {
                if !reader.next_frame(&mut frame)? {
                    break;
                }
                payload.extend_from_slice(&frame);
            }
            let header = FragmentHeader {
                size: 0,
                trigger_number,
                trigger_timestamp: begin,
                window_begin: begin,
                window_end: end,
                run_number: args.run,
                error_bits: 0,
                fragment_type: format.fragment_type(),
                sequence_number: 0,
                detector_id: swdaq_format::DETECTOR_ID_HD_TPC,
                element_id: SourceId::readout(link as u32),
            };
            fragments.push(Fragment::assemble(header, [&payload[..]]));
        }
        let header = TriggerRecordHeader {
            trigger_number,
            trigger_timestamp: begin,
            run_number: args.run,
            status_bits: 0,
            trigger_type: 0,
            sequence_number: 0,
            max_sequence_number: 0,
            element_id: SourceId::new(Subsystem::TR_BUILDER, 0),
            components: (0..args.links)
                .map(|l| ComponentRequest {
                    component: SourceId::readout(l),
                    window_begin: begin,
                    window_end: end,
                })
                .collect(),
        };
        writer.write(&TriggerRecord { header, fragments })?;
    }
    writer.close()?;
    writer
        .closed_files()
        .last()
        .cloned()
        .context("no file was written")
}

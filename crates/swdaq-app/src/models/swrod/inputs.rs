//! Where a SW ROD thread's blocks come from (`RodInput`) when the cards are not emulated here:
//! each card's raw file, read by a thread that routes its blocks to the ROBs
//! (`file_card_thread`), or each card's FELIX server, to which every ROB subscribes for its
//! e-links (read by its own SW ROD thread) and a thread per card for its TTC-to-host e-link
//! (`ttc_thread`). Either way a card's L1 accepts are its TTC records (`TtcSource`): card 0's
//! go to the HLT; a stop ends every card's at one common count, and each SW ROD thread ends
//! once its e-links have delivered that L1 accept.

use super::cards::{CardEnd, RobOutput, RobRouter, Shared};
use super::config::SwrodSettings;
use super::report::CardResult;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use swdaq_format::felix::{BlockHeader, RAW_FILE_TYPE, TTC_TO_HOST_ELINK};
use swdaq_format::rawfile::RawFileReader;
use swdaq_monitor::Counter;
use swdaq_sim::felix::{BlockSink, FelixFault, card_raw_path, card_truth_path};
use swdaq_swrod::net::subscriber::{Intake, Subscriber};
use swdaq_swrod::trigger::{L1Accept, TtcDecoder};

/// How long a SW ROD thread waits for blocks before it looks whether a stop has come.
const POLL: Duration = Duration::from_millis(20);
/// How long, after its card's L1 accepts have stopped, a SW ROD thread waits for its e-links
/// to deliver the last one (an e-link gone silent and not yet timed out would hold it).
pub(super) const DRAIN: Duration = Duration::from_secs(2);
/// Blocks a file reader routes between two looks at its TTC records and the ROB queues.
const FILE_BATCH_BLOCKS: usize = 256;

/// Reads a card's truth; a missing file is no truth (`None`), an unreadable one an error.
pub fn read_truth(dir: &Path, card: u16) -> anyhow::Result<Option<Vec<FelixFault>>> {
    let path = card_truth_path(dir, card);
    if !path.exists() {
        return Ok(None);
    }
    swdaq_sim::truth::read_csv(&path)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("reading the truth {}: {e}", path.display()))
}

/// What a SW ROD thread read last.
pub(super) enum Step {
    Data,
    Idle,
    End,
}

pub(super) enum RodInput {
    /// Buffers of blocks from a card thread or a file reader, emptied ones sent back.
    Channel(Receiver<Vec<u8>>, Sender<Vec<u8>>),
    /// The ROB's own subscription to its card's FELIX server.
    Tcp(Box<Subscriber>),
}

impl RodInput {
    /// Hands the next blocks to `decode`, where they lie.
    pub(super) fn next(&mut self, decode: impl FnOnce(&[u8])) -> Step {
        match self {
            Self::Channel(blocks, free) => match blocks.recv_timeout(POLL) {
                Ok(buf) => {
                    decode(&buf);
                    let _ = free.try_send(buf);
                    Step::Data
                }
                Err(RecvTimeoutError::Timeout) => Step::Idle,
                Err(RecvTimeoutError::Disconnected) => Step::End,
            },
            // A refusal after a lost connection ends the ROB's input like the server's End.
            Self::Tcp(subscriber) => match subscriber.receive() {
                Ok(Intake::Blocks(blocks)) => {
                    decode(blocks);
                    Step::Data
                }
                Ok(Intake::Idle) => Step::Idle,
                Ok(Intake::End(_)) | Err(_) => Step::End,
            },
        }
    }
}

/// A card's L1 accepts read off its TTC-to-host e-link: forwarded to the HLT (card 0) or
/// only counted, until the common stop count, where the card's last L1 ID is left for its
/// SW ROD threads.
pub(super) struct TtcSource<'a> {
    card: usize,
    settings: &'a SwrodSettings,
    shared: &'a Shared,
    to_hlt: Option<Sender<L1Accept>>,
    decoder: TtcDecoder,
    start: Instant,
    counter: Counter,
    published: u64,
    last: Option<u32>,
    done: bool,
    /// When this source first saw the stop.
    stop_seen: Option<Instant>,
    pub(super) result: CardResult,
}

impl<'a> TtcSource<'a> {
    pub(super) fn new(
        card: u16,
        settings: &'a SwrodSettings,
        shared: &'a Shared,
        to_hlt: Option<Sender<L1Accept>>,
        counter: Counter,
    ) -> Self {
        Self {
            card: usize::from(card),
            settings,
            shared,
            to_hlt,
            decoder: TtcDecoder::with_layout(settings.layout()),
            start: Instant::now(),
            counter,
            published: 0,
            last: None,
            done: false,
            stop_seen: None,
            result: CardResult {
                card,
                ..CardResult::default()
            },
        }
    }

    /// Whether the card's L1 accepts have reached the stop count.
    pub(super) fn done(&self) -> bool {
        self.done
    }

    /// Reads TTC-to-host blocks; each L1 accept until the stop count is counted (and sent to
    /// the HLT), later ones are not.
    pub(super) fn blocks(&mut self, blocks: &[u8]) {
        let Self {
            shared,
            settings,
            to_hlt,
            result,
            last,
            done,
            start,
            decoder,
            ..
        } = self;
        decoder.decode(blocks, |record| {
            if *done {
                return;
            }
            let l1a = L1Accept::of(record, result.l1as, settings.lumi_block_length(), *start);
            if let Some(tx) = to_hlt {
                let t = Instant::now();
                // The HLT gone (it failed) ends nothing here: the SW ROD threads still build.
                let _ = tx.send(l1a);
                result.waited_for_hlt_s += t.elapsed().as_secs_f64();
            }
            result.l1as += 1;
            *last = Some(record.l1_id);
            if result.l1as >= shared.stop_at.load(Ordering::Relaxed) {
                *done = true;
            }
        });
        self.shared.card_l1as[self.card].store(self.result.l1as, Ordering::Relaxed);
        self.counter.add(self.result.l1as - self.published);
        self.published = self.result.l1as;
        if self.done {
            self.end_here();
        }
    }

    /// The card's L1 accepts end here: its SW ROD threads end once they have the last one.
    fn end_here(&mut self) {
        self.done = true;
        self.to_hlt = None;
        self.shared
            .set_card_end(self.card, self.last.map_or(CardEnd::BeforeAny, CardEnd::At));
    }

    /// The card's result (its truth is read by the caller).
    pub(super) fn finish(mut self) -> CardResult {
        self.result.ttc_problems = self.decoder.problems() + self.decoder.malformed;
        self.result
    }

    /// After a stop, the card's L1 accepts end at the common stop count, or where they are
    /// if they do not reach it within [`DRAIN`] (the card's data stalled).
    pub(super) fn stop_if_asked(&mut self) {
        if self.done || !self.shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let seen = *self.stop_seen.get_or_insert_with(Instant::now);
        if self.result.l1as >= self.shared.stop_at.load(Ordering::Relaxed)
            || seen.elapsed() >= DRAIN
        {
            self.end_here();
        }
    }
}

/// Reads card `card`'s raw file, routing its blocks to the card's ROBs and its TTC-to-host
/// records to `ttc`, as fast as the ROBs take them; after a stop, it goes on routing until
/// every ROB has stopped taking blocks.
pub(super) fn file_card_thread(
    card: u16,
    dir: &Path,
    outputs: Vec<RobOutput>,
    per_rob: usize,
    mut ttc: TtcSource<'_>,
) -> anyhow::Result<CardResult> {
    let cpu = cpu_time::ThreadTime::now();
    let path = card_raw_path(dir, card);
    let file = swdaq_format::input_file::open_regular(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut reader = RawFileReader::new(BufReader::with_capacity(8 << 20, file))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let header = reader.header();
    let layout = ttc.settings.layout();
    let block_size = layout.block_size();
    anyhow::ensure!(
        header.frame_type == RAW_FILE_TYPE,
        "{}: not a FELIX raw file (frame type {:#x}, {} bytes per frame)",
        path.display(),
        header.frame_type.0,
        header.frame_size
    );
    anyhow::ensure!(
        header.frame_size as usize == block_size,
        "{}: blocks of {} bytes, but swrod.felix ({}) reads blocks of {block_size} bytes: \
         set swrod.felix.mode (and block_kib) as the file was written",
        path.display(),
        header.frame_size,
        if layout.is_full_mode() {
            "FULL mode"
        } else {
            "GBT mode"
        },
    );
    let mut router = RobRouter::new(&outputs, per_rob);
    let mut block = vec![0u8; block_size];
    let mut truncated = None;
    'file: loop {
        for _ in 0..FILE_BATCH_BLOCKS {
            match reader.read_frame_into(&mut block) {
                Ok(Some(len)) => {
                    // A record that is no block goes to the first ROB: its decoder counts it.
                    let elink =
                        BlockHeader::decode_as(layout, &block[..len]).map_or(0, |h| h.elink);
                    let elink = if len == block_size { elink } else { 0 };
                    router.block(elink, &block[..len]);
                }
                Ok(None) => break 'file,
                Err(e) => {
                    truncated = Some(e.to_string());
                    break 'file;
                }
            }
        }
        ttc.stop_if_asked();
        ttc.blocks(&router.ttc);
        router.ttc.clear();
        ttc.result.waited_for_rod_s += router.send();
        if router.all_closed() {
            break;
        }
    }
    ttc.blocks(&router.ttc);
    ttc.result.waited_for_rod_s += router.send();
    let mut result = ttc.finish();
    result.input_error = truncated.map(|e| format!("{}: {e}", path.display()));
    result.cpu_s = cpu.elapsed().as_secs_f64();
    Ok(result)
}

/// Subscribes to card `card`'s TTC-to-host e-link at `addr` and reads its L1 accepts until
/// the server's End, a stop, or the connection is lost for good.
pub(super) fn ttc_thread(
    card: u16,
    addr: SocketAddr,
    mut ttc: TtcSource<'_>,
    connect: impl Fn(SocketAddr, &[u16]) -> anyhow::Result<Subscriber>,
) -> anyhow::Result<CardResult> {
    let cpu = cpu_time::ThreadTime::now();
    let mut subscriber = connect(addr, &[TTC_TO_HOST_ELINK])?;
    check_card(&subscriber, card, ttc.settings)?;
    let mut ended_early = None;
    while !ttc.done() {
        ttc.stop_if_asked();
        match subscriber.receive() {
            Ok(Intake::Blocks(blocks)) => ttc.blocks(blocks),
            Ok(Intake::Idle) => {}
            Ok(Intake::End(_)) => {
                ended_early = subscriber.given_up().map(str::to_owned);
                break;
            }
            Err(e) => {
                ended_early = Some(e.to_string());
                break;
            }
        }
    }
    let intake = subscriber.counts;
    let mut result = ttc.finish();
    result.intake = Some(intake);
    result.input_error = ended_early;
    result.cpu_s = cpu.elapsed().as_secs_f64();
    Ok(result)
}

/// The server publishes the card expected there, with the e-links and the block size
/// configured.
pub(super) fn check_card(
    subscriber: &Subscriber,
    card: u16,
    settings: &SwrodSettings,
) -> anyhow::Result<()> {
    let got = subscriber.card();
    anyhow::ensure!(
        got.card == card && got.elinks == settings.felix.elinks,
        "FELIX server {} publishes card {} with {} e-links, where card {card} with {} (swrod.felix.elinks) was expected",
        subscriber.addr(),
        got.card,
        got.elinks,
        settings.felix.elinks
    );
    let block_size = settings.layout().block_size();
    anyhow::ensure!(
        got.block_size == block_size,
        "FELIX server {} publishes card {card} in {} KiB blocks, where {} KiB blocks (swrod.felix.mode, block_kib) were expected",
        subscriber.addr(),
        got.block_size / 1024,
        block_size / 1024
    );
    Ok(())
}

//! The emulated FELIX cards of a SW ROD run: each a thread emitting L1 accepts at the L1A
//! rate (held while run control pauses, and never past the L1A horizon: with applications,
//! the HLT supervisor's L1 accepts and the lead the cards may have on them), routing its
//! blocks to the ROBs of its e-links, and stopping at one common L1 accept count, fault-free
//! for the last `clean_tail_l1as`. While held the card's L1A clock stands still, as a
//! front end's does under the central trigger's busy.

use super::config::SwrodSettings;
use super::report::CardResult;
use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use swdaq_format::felix::TTC_TO_HOST_ELINK;
use swdaq_monitor::Counter;
use swdaq_sim::felix::{BlockSink, FelixCard, FelixFaults};
use swdaq_swrod::trigger::L1Accept;

/// How often a held card looks whether it may go on.
const HOLD_POLL: Duration = Duration::from_millis(1);
/// Cards emit L1 accepts in batches of about this much time.
const BATCH_SECONDS: f64 = 100e-6;
/// Batch of L1 accepts when not paced.
const UNPACED_BATCH: u64 = 64;

/// A card's link to one ROB: block buffers out, emptied buffers back for reuse.
pub(super) type RobOutput = (Sender<Vec<u8>>, Receiver<Vec<u8>>);

pub(super) struct Shared {
    pub(super) stop_at: AtomicU64,
    pub(super) stopping: AtomicBool,
    /// Run control's pause: the cards send no L1 accept while it is set (until the stop).
    pub(super) hold: Arc<AtomicBool>,
    /// The cards send L1 accepts up to this many (until the stop).
    pub(super) horizon: Arc<AtomicU64>,
    pub(super) card_l1as: Vec<AtomicU64>,
    /// With file or TCP input: where card `c`'s L1 accepts ended when a stop ended them early
    /// (see [`CardEnd`]); its SW ROD threads end once they have built that far.
    card_ends: Vec<AtomicU64>,
}

/// Where a card's L1 accepts ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CardEnd {
    /// At this L1 ID, the last one counted.
    At(u32),
    /// Before the first.
    BeforeAny,
}

const CARD_RUNNING: u64 = u64::MAX;
const CARD_ENDED_BEFORE_ANY: u64 = u64::MAX - 1;

impl Shared {
    /// Ends data taking a little ahead of every card and of `l1as` (every L1 accept the HLT
    /// may ask for).
    pub fn stop_at_least(&self, settings: &SwrodSettings, l1as: u64) {
        if self.stopping.swap(true, Ordering::Relaxed) {
            return;
        }
        let furthest = self
            .card_l1as
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
            .max(l1as);
        let target = furthest + settings.clean_tail_l1as + 2 * batch_l1as(settings);
        self.stop_at.fetch_min(target, Ordering::Relaxed);
    }

    /// A run of `s`'s cards, held while `hold` is set and kept below `horizon`.
    pub(super) fn new(s: &SwrodSettings, hold: Arc<AtomicBool>, horizon: Arc<AtomicU64>) -> Self {
        let cards = usize::from(s.cards);
        Self {
            stop_at: AtomicU64::new(if s.max_l1as > 0 { s.max_l1as } else { u64::MAX }),
            stopping: AtomicBool::new(false),
            hold,
            horizon,
            card_l1as: (0..cards).map(|_| AtomicU64::new(0)).collect(),
            card_ends: (0..cards).map(|_| AtomicU64::new(CARD_RUNNING)).collect(),
        }
    }

    pub(super) fn set_card_end(&self, c: usize, end: CardEnd) {
        let v = match end {
            CardEnd::At(l1_id) => u64::from(l1_id),
            CardEnd::BeforeAny => CARD_ENDED_BEFORE_ANY,
        };
        self.card_ends[c].store(v, Ordering::Release);
    }

    /// Where card `c`'s L1 accepts ended, once a stop has ended them.
    pub(super) fn card_end(&self, c: usize) -> Option<CardEnd> {
        match self.card_ends[c].load(Ordering::Acquire) {
            CARD_RUNNING => None,
            CARD_ENDED_BEFORE_ANY => Some(CardEnd::BeforeAny),
            l1_id => Some(CardEnd::At(l1_id as u32)),
        }
    }

    /// L1 accepts a card may have sent by now: the horizon, until the stop.
    fn limit(&self) -> u64 {
        if self.stopping.load(Ordering::Relaxed) {
            u64::MAX
        } else {
            self.horizon.load(Ordering::Relaxed)
        }
    }
}

/// What the run loop sees while the threads work.
pub struct Progress<'a> {
    pub(super) shared: &'a Shared,
    pub(super) settings: &'a SwrodSettings,
    pub(super) storage_failed: &'a AtomicBool,
    pub(super) cards_done: &'a dyn Fn() -> bool,
}

impl Progress<'_> {
    /// The storage has failed: the events after it would only be counted unwritten.
    pub fn storage_failed(&self) -> bool {
        self.storage_failed.load(Ordering::Relaxed)
    }

    /// Every card has ended (and so the SW ROD threads and the HLT's events).
    pub fn cards_done(&self) -> bool {
        (self.cards_done)()
    }

    /// Ends data taking at a common L1 accept count a little ahead of every card.
    pub fn stop(&self) {
        self.shared.stop_at_least(self.settings, 0);
    }
}

fn batch_l1as(s: &SwrodSettings) -> u64 {
    if s.l1a_rate_hz > 0.0 {
        ((s.l1a_rate_hz * BATCH_SECONDS).round() as u64).max(1)
    } else {
        UNPACED_BATCH
    }
}

pub(super) fn card_thread(
    c: u16,
    s: &SwrodSettings,
    shared: &Shared,
    outputs: Vec<RobOutput>,
    l1_tx: Option<Sender<L1Accept>>,
    l1as_counter: Counter,
) -> CardResult {
    let cpu = cpu_time::ThreadTime::now();
    let mut felix = s.felix.clone();
    felix.seed = felix.seed.wrapping_add(u64::from(c));
    // Validated with the configuration.
    let mut card = FelixCard::new(felix).expect("validated FELIX configuration");
    let per_rob = usize::from(s.felix.elinks / s.robs_per_card);
    let batch = batch_l1as(s);
    let start = Instant::now();
    let mut result = CardResult {
        card: c,
        ..Default::default()
    };
    let mut blocks = RobRouter::new(&outputs, per_rob);
    let mut clean = false;
    let mut published = 0;
    let ecr_every = u64::from(s.felix.ecr_every);
    // Time held by run control's pause or at the horizon: the L1A clock stands still.
    let mut held = Duration::ZERO;
    loop {
        let paused =
            shared.hold.load(Ordering::Relaxed) && !shared.stopping.load(Ordering::Relaxed);
        if paused || result.l1as >= shared.limit() {
            let t = Instant::now();
            std::thread::sleep(HOLD_POLL);
            held += t.elapsed();
            continue;
        }
        let stop_at = shared.stop_at.load(Ordering::Relaxed);
        // Never end right after an ECR: the truth lists it, and no chunk would carry it.
        let at_ecr = ecr_every > 0 && result.l1as > 0 && result.l1as.is_multiple_of(ecr_every);
        if result.l1as >= stop_at && !at_ecr {
            break;
        }
        if s.l1a_rate_hz > 0.0 {
            let due = result.l1as as f64 / s.l1a_rate_hz;
            let now = (start.elapsed() - held).as_secs_f64();
            if now < due {
                std::thread::sleep(Duration::from_secs_f64(due - now));
            } else {
                result.max_lag_ms = result.max_lag_ms.max((now - due) * 1e3);
            }
        }
        for _ in 0..batch {
            if !clean && result.l1as + s.clean_tail_l1as >= shared.stop_at.load(Ordering::Relaxed) {
                card.set_fault_rates(FelixFaults::default());
                clean = true;
            }
            let l1a = L1Accept::next(&card, result.l1as, s.lumi_block_length(), start);
            card.l1_accept(&mut blocks);
            result.l1as += 1;
            if let Some(tx) = &l1_tx {
                let t = Instant::now();
                if tx.send(l1a).is_err() {
                    break;
                }
                result.waited_for_hlt_s += t.elapsed().as_secs_f64();
            }
            if result.l1as >= shared.stop_at.load(Ordering::Relaxed)
                || result.l1as >= shared.limit()
            {
                break;
            }
        }
        shared.card_l1as[usize::from(c)].store(result.l1as, Ordering::Relaxed);
        l1as_counter.add(result.l1as - published);
        published = result.l1as;
        result.waited_for_rod_s += blocks.send();
    }
    card.flush(&mut blocks);
    result.waited_for_rod_s += blocks.send();
    result.faults = card.faults().to_vec();
    result.cpu_s = cpu.elapsed().as_secs_f64();
    result
}

/// A card's blocks, each appended to the buffer of the ROB of its e-link (card e-link `i` is
/// number `i`) as the card completes it; the TTC-to-host e-link's to their own buffer.
pub(super) struct RobRouter<'a> {
    outputs: &'a [RobOutput],
    per_rob: usize,
    buffers: Vec<Vec<u8>>,
    /// ROBs that no longer take blocks (their thread has ended).
    closed: Vec<bool>,
    pub(super) ttc: Vec<u8>,
}

impl<'a> RobRouter<'a> {
    pub(super) fn new(outputs: &'a [RobOutput], per_rob: usize) -> Self {
        Self {
            outputs,
            per_rob: per_rob.max(1),
            buffers: outputs.iter().map(|_| Vec::new()).collect(),
            closed: vec![false; outputs.len()],
            ttc: Vec::new(),
        }
    }

    /// Hands each ROB its buffer (waiting while its queue is full) and takes an emptied one
    /// back; returns the seconds spent waiting. A ROB that has stopped taking blocks is
    /// passed over.
    pub(super) fn send(&mut self) -> f64 {
        let mut waited = 0.0;
        for (((tx, free), b), closed) in self
            .outputs
            .iter()
            .zip(&mut self.buffers)
            .zip(&mut self.closed)
        {
            if b.is_empty() {
                continue;
            }
            if *closed {
                b.clear();
                continue;
            }
            let mut next = free.try_recv().unwrap_or_default();
            next.clear();
            let t = Instant::now();
            *closed = tx.send(std::mem::replace(b, next)).is_err();
            waited += t.elapsed().as_secs_f64();
        }
        waited
    }

    /// Whether every ROB has stopped taking blocks (as of the last send).
    pub(super) fn all_closed(&self) -> bool {
        self.closed.iter().all(|&c| c)
    }
}

impl BlockSink for RobRouter<'_> {
    #[inline]
    fn block(&mut self, elink: u16, block: &[u8]) {
        if elink == TTC_TO_HOST_ELINK {
            self.ttc.extend_from_slice(block);
            return;
        }
        // A block the card could not have written (its header unreadable in a file) goes to
        // the first ROB, whose decoder counts it corrupt.
        let rob = (usize::from(elink) / self.per_rob).min(self.buffers.len() - 1);
        self.buffers[rob].extend_from_slice(block);
    }
}

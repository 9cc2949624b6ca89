//! A readout unit's input: one [`FedLink`] per FED, fed by the unit's FED emulator (paced by
//! the trigger clock) or by one `FrameSource` per FED (raw files, UDP), and the
//! super-fragment of each event built from the links, lined up by level-1 id.
//!
//! The emulator stays one per unit (its FEDs share the trigger) and writes each FED's
//! fragment straight into that FED's buffer, as a FED's DMA would: no copy on the way, which
//! `swdaq bench evb` measures (`fed_link_ns_per_fragment` against the direct path). It
//! emulates the event being built and no further: its links then hold nothing newer, so
//! [`place`](crate::fed_link::place) needs no look-ahead.
//!
//! End of data, for a stream (UDP): an event no FED of the unit sent anything for is never
//! made up of missing fragments. While every FED is silent the unit waits for data (not
//! begun, paused, or ended: the run's `duration_s`, `max_events` or Ctrl-C ends it), and the
//! first FED to send again gives the others a fresh `stop_wait`.
//!
//! Trigger time: the emulator's for emulated FEDs. FED fragments carry none, so with files
//! or UDP an event's trigger time is when its readout unit found all its fragments placed
//! (nanoseconds since the unit started): lumi sections and latency then count from reading.

use crate::check::{FedCounts, SuperFragmentBuilder};
use crate::fed_link::{FedLink, MIN_LINK_SLOTS, Placement};
use crate::message::SuperFragment;
use crate::pause::TriggerClock;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};
use swdaq_format::fed::{FED_MIN_SIZE, FED_WORD};
use swdaq_readout::source::{FrameSource, Poll};
use swdaq_sim::fed::{FedConfigError, FedEmulator, FedFault, FedFaultKind, FedSimConfig};

/// How long a readout unit waits before asking its links again when an event is not ready.
const NOT_READY_WAIT: Duration = Duration::from_micros(200);
/// How long a unit waits before looking again whether a pause has ended.
const PAUSED_WAIT: Duration = Duration::from_millis(5);
/// Standard deviations above the mean an emulated FED's slot holds: a larger fragment
/// (never seen: odds below 1e-50) would be counted oversized.
const EMULATED_SLOT_SIGMAS: u32 = 16;
/// Slots of an emulated FED's link: it holds one unread fragment at a time (the event being
/// built) and the ring's guard one more, so a few slots do, and they stay in cache (64 were
/// written cold, one every 64 events).
const EMULATED_LINK_SLOTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    #[error(transparent)]
    Config(#[from] FedConfigError),
    #[error("FED {fed}'s latency buffer: {source}")]
    Buffer { fed: u16, source: io::Error },
}

/// How emulated FEDs follow the trigger clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// As fast as the builder units take events.
    FlatOut,
    /// Each event readable once the tick its trigger time falls in has passed (trigger times
    /// rounded up to a multiple of the tick; a zero tick: at its trigger time). Data arrives
    /// in blocks, as a DMA engine hands it over, so a waiting thread wakes once per tick, not
    /// once per event: a wake-up costs more CPU than building an event.
    Tick(Duration),
}

/// `ns` rounded up to a whole number of `tick`s.
fn round_up(ns: u64, tick: Duration) -> u64 {
    let tick = tick.as_nanos() as u64;
    if tick == 0 {
        ns
    } else {
        ns.div_ceil(tick) * tick
    }
}

/// Where the links' fragments come from.
enum Feed {
    Emulator {
        emulator: Box<FedEmulator>,
        /// Last event produced into the links.
        generated: u64,
        /// Per produced, unbuilt event: its trigger time and injected faults.
        pending: VecDeque<(u64, Vec<FedFault>)>,
        pacing: Pacing,
    },
    /// One source per link, in link order.
    Sources(Vec<Box<dyn FrameSource>>),
}

/// One FED's input as a source: its id, source and largest fragment in bytes.
pub struct FedSource {
    pub fed: u16,
    pub source: Box<dyn FrameSource>,
    pub max_fragment: usize,
}

pub struct Producer {
    feed: Feed,
    links: Vec<FedLink>,
    builder: SuperFragmentBuilder,
    /// The event built next.
    next: u64,
    /// Each link's placement of `next` (a vector kept across events: allocated per event it
    /// cost a malloc and a free); final once `placed`.
    placements: Vec<Placement>,
    placed: bool,
    /// When `next` was found ready (sources: its trigger time).
    ready_ns: u64,
    stop_wait: Duration,
    /// Streams only: every link was silent with nothing to read; the next event waits
    /// until a FED sends again ([`Self::woken`]).
    idle: bool,
    /// The unit's last landing before it went idle.
    last_before_idle: Option<Instant>,
    injected: BTreeMap<(u16, FedFaultKind), u64>,
    clock: TriggerClock,
}

impl Producer {
    /// Emulated FEDs, following the run's trigger `clock` (shared by every readout unit of the
    /// process).
    pub fn new(
        ru: u16,
        config: FedSimConfig,
        clock: TriggerClock,
        pacing: Pacing,
    ) -> Result<Self, ProducerError> {
        let emulator = FedEmulator::new(config)?;
        let links = emulator
            .config()
            .feds
            .iter()
            .map(|spec| {
                let bytes = spec.mean_bytes + EMULATED_SLOT_SIGMAS * spec.spread_bytes;
                let slot = (bytes as usize)
                    .next_multiple_of(FED_WORD)
                    .max(FED_MIN_SIZE);
                FedLink::new(spec.id, EMULATED_LINK_SLOTS, slot).map_err(|source| {
                    ProducerError::Buffer {
                        fed: spec.id,
                        source,
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        let feed = Feed::Emulator {
            emulator: Box::new(emulator),
            generated: 0,
            pending: VecDeque::new(),
            pacing,
        };
        Ok(Self::with_links(ru, feed, links, Duration::ZERO, clock))
    }

    /// FEDs read from sources (files, UDP) into buffers of `slots` fragments, from event
    /// `first_event` (1 from the start of a run); a FED with nothing to read for `stop_wait`
    /// while an event waits for it is taken as stopped (its fragments missing) until it
    /// sends again.
    pub fn from_sources(
        ru: u16,
        sources: Vec<FedSource>,
        slots: usize,
        stop_wait: Duration,
        first_event: u64,
        clock: TriggerClock,
    ) -> Result<Self, ProducerError> {
        let mut links = Vec::with_capacity(sources.len());
        let mut feeds = Vec::with_capacity(sources.len());
        for s in sources {
            let link = FedLink::new(
                s.fed,
                slots.max(MIN_LINK_SLOTS),
                s.max_fragment.max(FED_MIN_SIZE),
            )
            .map_err(|source| ProducerError::Buffer { fed: s.fed, source })?;
            links.push(link);
            feeds.push(s.source);
        }
        let mut producer = Self::with_links(ru, Feed::Sources(feeds), links, stop_wait, clock);
        producer.next = first_event.max(1);
        Ok(producer)
    }

    fn with_links(
        ru: u16,
        feed: Feed,
        links: Vec<FedLink>,
        stop_wait: Duration,
        clock: TriggerClock,
    ) -> Self {
        let feds = links.iter().map(|l| l.fed).collect();
        Self {
            feed,
            links,
            builder: SuperFragmentBuilder::new(ru, feds),
            next: 1,
            placements: Vec::new(),
            placed: false,
            ready_ns: 0,
            stop_wait,
            idle: false,
            last_before_idle: None,
            injected: BTreeMap::new(),
            clock,
        }
    }

    /// The next event's number and trigger time (sources: the time now until it is ready).
    pub fn peek(&mut self) -> (u64, u64) {
        self.resolve();
        (self.next, self.trigger_ns())
    }

    fn trigger_ns(&self) -> u64 {
        match &self.feed {
            Feed::Emulator { pending, .. } => pending.front().map_or(0, |(t, _)| *t),
            Feed::Sources(_) if self.placed => self.ready_ns,
            Feed::Sources(_) => self.clock.elapsed_ns(),
        }
    }

    fn paced(&self) -> bool {
        self.tick().is_some()
    }

    fn tick(&self) -> Option<Duration> {
        match self.feed {
            Feed::Emulator {
                pacing: Pacing::Tick(tick),
                ..
            } => Some(tick),
            _ => None,
        }
    }

    /// How long until the next event may be taken: when paced, the end of the tick its
    /// trigger time falls in (after the pauses so far), a short wait while the trigger is
    /// paused at or before it, or while its fragments are not all placed; `None` when it may
    /// be taken now.
    pub fn not_due_for(&mut self) -> Option<Duration> {
        let tick = self.tick();
        // Held before it is emulated: a readout unit reads nothing past the pause point.
        if tick.is_some() && self.clock.pause().holds(self.next) {
            return Some(PAUSED_WAIT);
        }
        if !self.resolve() {
            return Some(NOT_READY_WAIT);
        }
        let due = self.clock.due(round_up(self.trigger_ns(), tick?));
        due.checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// How far the next event is behind its trigger time, after the pauses so far (zero when
    /// not paced or not due).
    pub fn behind(&mut self) -> Duration {
        let (_, trigger_ns) = self.peek();
        if !self.paced() {
            return Duration::ZERO;
        }
        self.clock.due(trigger_ns).elapsed()
    }

    /// The trigger clock this unit follows (its pauses).
    pub fn clock(&self) -> &TriggerClock {
        &self.clock
    }

    /// True when every source has ended and every fragment is built: no event will come.
    pub fn exhausted(&self) -> bool {
        matches!(self.feed, Feed::Sources(_)) && self.links.iter().all(FedLink::drained)
    }

    /// Places the next event on every link, reading (or emulating) what that needs; true
    /// once every link has a placement.
    fn resolve(&mut self) -> bool {
        if self.placed {
            return true;
        }
        if self.idle && !self.woken() {
            return false;
        }
        // Emulated links hold nothing past the last emulated event, so once it is the next
        // one every placement is final (a fragment numbered beyond it has a corrupt id).
        let (settled, newest) = match &self.feed {
            Feed::Emulator { .. } => {
                self.emulate();
                (true, self.next)
            }
            Feed::Sources(_) => (false, u64::MAX),
        };
        let mut placements = std::mem::take(&mut self.placements);
        placements.clear();
        for index in 0..self.links.len() {
            placements.push(self.place_on(index, settled, newest));
        }
        self.placements = placements;
        if self.placements.contains(&Placement::Wait) {
            return false;
        }
        // No FED sent anything for it: no evidence the event was triggered. The FEDs have
        // not all stopped; the data has (not begun, paused, ended): wait for it.
        let nothing = self.links.iter().all(|l| l.unread() == 0);
        if nothing && matches!(self.feed, Feed::Sources(_)) {
            // Ended while placing (a file's last records were no fragments): no event.
            if self.exhausted() {
                return false;
            }
            self.idle = true;
            self.last_before_idle = self.links.iter().filter_map(FedLink::last_landed).max();
            return false;
        }
        self.ready_ns = self.clock.elapsed_ns();
        self.placed = true;
        true
    }

    /// While idle: reads every link; once any FED has sent, every link waits for the next
    /// event afresh (up to `stop_wait` from now), so FEDs sending the same event a moment
    /// apart are not taken as stopped; a FED that stopped while the others still sent stays
    /// stopped.
    fn woken(&mut self) -> bool {
        let Feed::Sources(sources) = &mut self.feed else {
            return true;
        };
        for (index, (link, source)) in self.links.iter_mut().zip(sources).enumerate() {
            link.fill(&mut **source, self.next, self.builder.ingest_mut(index));
        }
        if self.links.iter().all(|l| l.unread() == 0) && !self.exhausted() {
            return false;
        }
        for link in &mut self.links {
            link.rearm(self.last_before_idle, self.stop_wait);
        }
        self.idle = false;
        true
    }

    /// Places the next event on link `index`, reading its source and skipping strays.
    fn place_on(&mut self, index: usize, settled: bool, newest: u64) -> Placement {
        let (event, link) = (self.next, &mut self.links[index]);
        loop {
            if let Feed::Sources(sources) = &mut self.feed {
                link.fill(&mut *sources[index], event, self.builder.ingest_mut(index));
            }
            match link.place(event, settled, newest, self.stop_wait) {
                Placement::Stray => {
                    let builder = &mut self.builder;
                    link.consume(|bytes| builder.stray(index, event, bytes));
                }
                placement => return placement,
            }
        }
    }

    /// Emulates the event built next into the links (one fragment per FED that sent one),
    /// unless it already is.
    fn emulate(&mut self) {
        let Feed::Emulator {
            emulator,
            generated,
            pending,
            ..
        } = &mut self.feed
        else {
            return;
        };
        if *generated >= self.next {
            return;
        }
        let accept = emulator.next_accept();
        let mut faults = Vec::new();
        // The links are in configuration order, as the emulator numbers its FEDs.
        for (index, link) in self.links.iter_mut().enumerate() {
            let Some(plan) = emulator.plan(&accept, index, &mut faults) else {
                continue;
            };
            let landed = link.land(self.next, self.builder.ingest_mut(index), |slot| {
                Ok(Poll::Frame(emulator.write(&plan, slot)))
            });
            // The links hold at most this event's fragments: there is always room.
            debug_assert!(matches!(landed, Ok(Poll::Frame(_))));
        }
        *generated = accept.event;
        pending.push_back((accept.trigger_ns, faults));
    }

    /// Builds the next event's super-fragment from its placed fragments and moves on; call
    /// once [`Self::not_due_for`] says it may be taken (a link still waiting counts missing).
    pub fn take(&mut self) -> (u64, SuperFragment) {
        self.resolve();
        let trigger_ns = self.trigger_ns();
        let mut placements = std::mem::take(&mut self.placements);
        if !self.placed {
            // Not ready: every link counts missing, none is read.
            placements.clear();
        }
        let event = self.next;
        // Sized once: grown from empty it was copied as it grew.
        let placed: usize = self
            .links
            .iter_mut()
            .zip(&placements)
            .filter(|(_, p)| **p == Placement::Fragment)
            .map(|(link, _)| link.oldest_len())
            .sum();
        let mut data = Vec::with_capacity(placed);
        let mut bad_feds = 0;
        for (index, link) in self.links.iter_mut().enumerate() {
            let builder = &mut self.builder;
            let good = match placements.get(index) {
                Some(Placement::Fragment) => {
                    link.consume(|bytes| builder.add(index, event, Some(bytes), &mut data))
                }
                _ => builder.add(index, event, None, &mut data),
            };
            bad_feds += u16::from(!good);
        }
        if let Feed::Emulator { pending, .. } = &mut self.feed
            && let Some((_, faults)) = pending.pop_front()
        {
            // Faults count as injected once their event is built (not merely emulated ahead).
            for f in faults {
                *self.injected.entry((f.fed, f.kind)).or_default() += 1;
            }
        }
        self.next += 1;
        self.placements = placements;
        self.placed = false;
        let sf = SuperFragment {
            ru: self.builder.ru(),
            event,
            bad_feds,
            data,
        };
        (trigger_ns, sf)
    }

    pub fn feds(&self) -> &[u16] {
        self.builder.feds()
    }

    pub fn fed_counts(&self) -> &[FedCounts] {
        self.builder.counts()
    }

    /// Faults the emulator injected, per (FED, kind): the truth the counts are checked against.
    pub fn injected(&self) -> &BTreeMap<(u16, FedFaultKind), u64> {
        &self.injected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::FedCheckFailure;
    use proptest::prelude::*;
    use swdaq_format::fed::{FED_L1_ID_MASK, FedHeader, encode_fed_fragment};
    use swdaq_readout::source::Batch;

    /// What one FED sends for one event.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Sent {
        Good,
        Missing,
        /// The L1 id moved this far (2^20 and more, so no neighbour's).
        WrongL1Id(u32),
        BadCrc,
        BadLength,
        /// A record whose header is not a FED header.
        Garbage,
    }

    fn sent() -> impl Strategy<Value = Sent> {
        prop_oneof![
            6 => Just(Sent::Good),
            1 => Just(Sent::Missing),
            1 => (0u32..1 << 22).prop_map(|r| Sent::WrongL1Id((1 << 20) + r)),
            1 => Just(Sent::BadCrc),
            1 => Just(Sent::BadLength),
            1 => Just(Sent::Garbage),
        ]
    }

    /// The counter each kind must end in (`None`: passes).
    fn counter(sent: Sent) -> Option<FedCheckFailure> {
        match sent {
            Sent::Good => None,
            Sent::Missing => Some(FedCheckFailure::Missing),
            Sent::WrongL1Id(_) => Some(FedCheckFailure::WrongL1Id),
            Sent::BadCrc => Some(FedCheckFailure::BadCrc),
            Sent::BadLength => Some(FedCheckFailure::BadLength),
            Sent::Garbage => Some(FedCheckFailure::Malformed),
        }
    }

    fn fragment(fed: u16, event: u64, sent: Sent, words: usize) -> Option<Vec<u8>> {
        let mut l1_id = event as u32 & FED_L1_ID_MASK;
        match sent {
            Sent::Missing => return None,
            Sent::Garbage => return Some(vec![0x33; 8 * (words + 2)]),
            Sent::WrongL1Id(by) => l1_id = (l1_id + by) & FED_L1_ID_MASK,
            _ => {}
        }
        let header = FedHeader {
            l1_id,
            source_id: fed,
            ..Default::default()
        };
        let mut out = Vec::new();
        let payload: Vec<u8> = (0..words * 8).map(|i| (i as u64 ^ event) as u8).collect();
        encode_fed_fragment(&mut out, &header, &Default::default(), &payload);
        let trailer = out.len() - 8;
        match sent {
            Sent::BadCrc => out[trailer + 2] ^= 0x5A,
            Sent::BadLength => out[trailer + 4] ^= 0x01,
            _ => {}
        }
        Some(out)
    }

    /// Records in memory; `idle[i]`: how many `Idle` answers come before record `i`; a
    /// `truncated` stream fails after its last record. Up to `batch` records per
    /// `next_frames` call, as a socket's queue gives them: those queued without an idle
    /// answer between them.
    #[derive(Clone)]
    struct Records {
        records: VecDeque<(u8, Vec<u8>)>,
        truncated: bool,
        batch: usize,
    }

    impl FrameSource for Records {
        fn batch_size(&self) -> usize {
            self.batch
        }

        fn next_frames(
            &mut self,
            run: &mut swdaq_readout::ring::SlotRun<'_>,
            lens: &mut [usize],
        ) -> io::Result<Batch> {
            let mut received = 0;
            while received < lens.len().min(self.batch) {
                if received > 0 && self.records.front().is_none_or(|(idle, _)| *idle > 0) {
                    break;
                }
                match self.next_frame(run.slot_mut(received))? {
                    Poll::Frame(len) => lens[received] = len,
                    other => return Ok(other.into()),
                }
                received += 1;
            }
            Ok(Batch::Frames(received))
        }

        fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
            match self.records.front_mut() {
                Some((idle, _)) if *idle > 0 => {
                    *idle -= 1;
                    Ok(Poll::Idle)
                }
                Some(_) => {
                    let (_, bytes) = self.records.pop_front().expect("front exists");
                    // A record larger than the slot: its length says so, as a socket's does.
                    let fits = bytes.len().min(slot.len());
                    slot[..fits].copy_from_slice(&bytes[..fits]);
                    Ok(Poll::Frame(bytes.len()))
                }
                None if self.truncated => Err(io::ErrorKind::UnexpectedEof.into()),
                None => Ok(Poll::End),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Any faults on any FED, any arrival interleaving (idle polls), across the 24-bit
        /// wrap: every event's super-fragment holds exactly its good fragments, in FED order,
        /// and every fault is in exactly one counter of its kind; read one record at a time
        /// or in batches, the same.
        #[test]
        fn super_fragments_hold_exactly_the_good_fragments(
            first in prop_oneof![Just(1u64), (1u64 << 24) - 40..(1 << 24) + 40],
            plan in proptest::collection::vec(
                proptest::collection::vec((sent(), 0u8..3, 0usize..6), 60),
                1..4,
            ),
            stops in proptest::collection::vec(proptest::option::weighted(0.25, 20usize..60), 3),
            truncated in proptest::collection::vec(any::<bool>(), 3),
            oversized in proptest::collection::vec(proptest::bool::weighted(0.2), 3),
            batch in 2usize..=64,
        ) {
            let events = 60;
            let mut expected = vec![Vec::new(); events];
            let mut numbered = vec![false; events];
            let mut counts = vec![[0u64; 6]; plan.len()];
            let mut good = vec![0u64; plan.len()];
            let mut sources = Vec::new();
            for (k, fed_plan) in plan.iter().enumerate() {
                let fed = 10 + k as u16;
                let stop = stops[k].unwrap_or(events);
                let mut records = VecDeque::new();
                for (i, &(sent, idle, words)) in fed_plan.iter().enumerate() {
                    let event = first + i as u64;
                    // A stopped FED's and a truncated stream's lost record are missing.
                    let sent = if i >= stop { Sent::Missing } else { sent };
                    let cut = truncated[k] && i + 1 == stop && sent != Sent::Missing;
                    let sent = if cut { Sent::Missing } else { sent };
                    match counter(sent) {
                        None => good[k] += 1,
                        Some(f) => counts[k][f as usize] += 1,
                    }
                    if let Some(bytes) = fragment(fed, event, sent, words) {
                        numbered[i] |= matches!(sent, Sent::Good | Sent::BadCrc | Sent::BadLength);
                        if sent == Sent::Good {
                            expected[i].extend_from_slice(&bytes);
                        }
                        records.push_back((idle, bytes));
                    }
                }
                // Some records too large for a slot: kept empty, counted oversized.
                if oversized[k] {
                    records.push_back((0, vec![0x44; 8 * 9]));
                }
                sources.push((fed, Records {
                    records,
                    truncated: truncated[k] && stop < events,
                    batch: 1,
                }));
            }
            let (built_one, counts_one) = build(&sources, first, events);
            for s in &mut sources {
                s.1.batch = batch;
            }
            let (built_many, counts_many) = build(&sources, first, events);
            // Batched intake places and counts exactly as one record per read does.
            prop_assert_eq!(&built_many, &built_one);
            prop_assert_eq!(&counts_many, &counts_one);
            let built = built_one.len();
            for (n, sf) in built_one.iter().enumerate() {
                prop_assert_eq!(sf.event, first + n as u64);
                prop_assert_eq!(&sf.data, &expected[n]);
            }
            // The input ends with its last fragment: events after every FED's last correctly
            // numbered one may not be built (a misnumbered last one is placed earlier).
            let all_missing_tail = numbered.iter().rev().take_while(|&&any| !any).count();
            prop_assert!(built + all_missing_tail >= events, "built {built}");
            for (k, c) in counts_one.iter().enumerate() {
                if built == events && !oversized[k] {
                    prop_assert_eq!(c.failures, counts[k], "FED {}", k);
                    prop_assert_eq!(c.good, good[k]);
                }
                prop_assert_eq!(c.ingest.truncated, u64::from(truncated[k] && stops[k].is_some()));
                prop_assert_eq!(c.ingest.oversized, u64::from(oversized[k]));
            }
        }
    }

    #[test]
    fn trigger_times_round_up_to_whole_ticks() {
        let tick = Duration::from_nanos(500);
        assert_eq!(
            [0, 1, 500, 501].map(|ns| round_up(ns, tick)),
            [0, 500, 500, 1000]
        );
        assert_eq!(round_up(777, Duration::ZERO), 777);
    }

    /// Paced by a tick, every event whose trigger time falls in a tick that has passed is
    /// readable at once, and the next one only when its own tick ends.
    #[test]
    fn paced_events_are_readable_a_whole_tick_at_a_time() {
        let tick = Duration::from_secs(1);
        let config = FedSimConfig {
            trigger_rate_hz: 1000.0,
            ..crate::check::four_feds_with_every_fault(0.0)
        };
        // The run began 1.5 ticks ago: the first tick is over, the second half gone.
        let start = Instant::now()
            .checked_sub(tick * 3 / 2)
            .expect("the machine has been up for seconds");
        let mut producer =
            Producer::new(0, config, TriggerClock::new(start), Pacing::Tick(tick)).unwrap();
        let mut taken = Vec::new();
        while producer.not_due_for().is_none() {
            taken.push(producer.take().0);
        }
        assert!(
            taken.len() >= 999,
            "a tick's worth at once: {}",
            taken.len()
        );
        assert!(taken.iter().all(|&t| t <= tick.as_nanos() as u64));
        let (_, next) = producer.peek();
        assert!(next > tick.as_nanos() as u64);
        // Due when the second tick ends, half a tick from now (less this test's own time).
        let wait = producer.not_due_for().expect("the next tick has not ended");
        assert!(wait <= tick / 2 && wait > tick / 4, "{wait:?}");
    }

    /// Paused at an event, a unit gives out nothing from it on however long the pause lasts,
    /// and on resume the clock goes on from where it stood: no burst of overdue events.
    #[test]
    fn a_paused_trigger_holds_its_events_and_resumes_where_it_stood() {
        let config = FedSimConfig {
            trigger_rate_hz: 1000.0,
            ..crate::check::four_feds_with_every_fault(0.0)
        };
        let clock = TriggerClock::new(Instant::now());
        let mut producer =
            Producer::new(0, config, clock.clone(), Pacing::Tick(Duration::ZERO)).unwrap();
        while producer.peek().0 < 5 {
            while let Some(wait) = producer.not_due_for() {
                std::thread::sleep(wait);
            }
            producer.take();
        }
        clock.pause().pause_from(5);
        let paused = Instant::now();
        while paused.elapsed() < Duration::from_millis(300) {
            assert!(producer.not_due_for().is_some(), "event 5 is held");
            std::thread::sleep(Duration::from_millis(1));
        }
        clock.pause().resume();
        // Event 5's trigger time (a few ms into the run) now lies 300 ms later on the wall
        // clock: not overdue by the pause, at most by this test's own time.
        let (_, trigger_ns) = producer.peek();
        assert!(clock.pause().shift() >= Duration::from_millis(300));
        assert!(
            producer.behind() < Duration::from_millis(150),
            "event at {trigger_ns} ns is {:?} behind",
            producer.behind()
        );
    }

    /// Emulated straight into the links, every super-fragment is the one the direct path
    /// builds from the emulator's whole event (whose bytes its own tests pin for a seed).
    #[test]
    fn emulated_links_build_the_direct_paths_super_fragments() {
        let config = crate::check::four_feds_with_every_fault(0.03);
        let mut producer = Producer::new(
            0,
            config.clone(),
            TriggerClock::new(Instant::now()),
            Pacing::FlatOut,
        )
        .unwrap();
        let mut emulator = FedEmulator::new(config).unwrap();
        let mut direct = SuperFragmentBuilder::new(0, vec![10, 11, 12, 13]);
        let (mut event, mut truth) = (swdaq_sim::fed::FedEvent::default(), Vec::new());
        for _ in 0..1000 {
            emulator.next_event(&mut event, &mut truth);
            assert_eq!(producer.take().1, direct.build(&event));
        }
        // The checks' counts agree; the links' ingest counts are the producer's own.
        let checked: Vec<_> = producer
            .fed_counts()
            .iter()
            .map(|c| FedCounts {
                ingest: Default::default(),
                ..*c
            })
            .collect();
        assert_eq!(checked, direct.counts());
    }

    /// Builds up to `events` events from copies of `sources`: their super-fragments and
    /// each FED's counts.
    fn build(
        sources: &[(u16, Records)],
        first: u64,
        events: usize,
    ) -> (Vec<SuperFragment>, Vec<FedCounts>) {
        let sources = sources
            .iter()
            .map(|(fed, records)| FedSource {
                fed: *fed,
                source: Box::new(records.clone()),
                max_fragment: 8 * 8,
            })
            .collect();
        let mut producer = Producer::from_sources(
            0,
            sources,
            64,
            Duration::from_secs(30),
            first,
            TriggerClock::new(Instant::now()),
        )
        .unwrap();
        let mut built = Vec::new();
        for _ in 0..100_000 {
            if built.len() == events || producer.exhausted() {
                break;
            }
            if producer.not_due_for().is_none() {
                built.push(producer.take().1);
            }
        }
        (built, producer.fed_counts().to_vec())
    }

    /// Emulated FEDs with every fault kind: each fault ends in exactly one counter of its
    /// kind, and a stopped FED does not hold events up.
    #[test]
    fn emulated_faults_are_counted_once_through_the_links() {
        let config = crate::check::four_feds_with_every_fault(0.03);
        let mut producer = Producer::new(
            0,
            config,
            TriggerClock::new(Instant::now()),
            Pacing::FlatOut,
        )
        .unwrap();
        let mut bad = 0;
        for n in 1..=1000 {
            assert_eq!(producer.not_due_for(), None);
            let (_, sf) = producer.take();
            assert_eq!(sf.event, n);
            bad += u64::from(sf.bad_feds);
        }
        let injected = producer.injected().clone();
        assert_eq!(bad, injected.values().sum::<u64>());
        for (i, c) in producer.fed_counts().iter().enumerate() {
            let fed = 10 + i as u16;
            let of = |k| injected.get(&(fed, k)).copied().unwrap_or(0);
            use FedCheckFailure as F;
            use FedFaultKind as K;
            assert_eq!(c.failed(F::Missing), of(K::Missing) + of(K::Stopped));
            assert_eq!(c.failed(F::WrongL1Id), of(K::WrongL1Id));
            assert_eq!(c.failed(F::BadCrc), of(K::BadCrc));
            assert_eq!(c.failed(F::BadLength), of(K::BadLength));
            assert_eq!(c.good + c.failures.iter().sum::<u64>(), 1000);
            assert_eq!(c.ingest.fragments, 1000 - c.failed(F::Missing));
        }
    }
}

#[cfg(test)]
mod udp_tests {
    use super::*;
    use swdaq_format::fed::{FedHeader, encode_fed_fragment};
    use swdaq_readout::udp::{UdpSender, UdpSource};

    /// Two FEDs on 127.0.0.1 (UDP sources, as `input` opens them) with their senders.
    fn udp_feds(stop_wait: Duration) -> (Producer, Vec<UdpSender>) {
        let mut sources = Vec::new();
        let mut senders = Vec::new();
        for fed in [1u16, 2] {
            let source = UdpSource::bind("127.0.0.1:0".parse().unwrap())
                .and_then(UdpSource::without_waiting)
                .unwrap();
            senders.push(UdpSender::connect(source.local_addr().unwrap()).unwrap());
            sources.push(FedSource {
                fed,
                source: Box::new(source),
                max_fragment: 256,
            });
        }
        let producer = Producer::from_sources(
            0,
            sources,
            64,
            stop_wait,
            1,
            TriggerClock::new(Instant::now()),
        )
        .unwrap();
        (producer, senders)
    }

    fn fed_fragment(fed: u16, event: u64) -> Vec<u8> {
        let header = FedHeader {
            l1_id: event as u32,
            source_id: fed,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        encode_fed_fragment(&mut bytes, &header, &Default::default(), &[0; 64]);
        bytes
    }

    /// Before any FED sends (or after all stop), no event is made up of missing fragments:
    /// the unit waits. When one FED sends, the other gets a fresh `stop_wait`, not "stopped"
    /// from the silence before.
    #[test]
    fn silence_on_every_fed_is_no_event_and_the_first_to_send_wakes_the_others() {
        let stop_wait = Duration::from_millis(50);
        let (mut producer, senders) = udp_feds(stop_wait);
        let quiet = Instant::now();
        while quiet.elapsed() < 4 * stop_wait {
            assert!(producer.not_due_for().is_some(), "an event from nothing");
        }
        senders[0].send(&fed_fragment(1, 1)).unwrap();
        let woken = Instant::now();
        while woken.elapsed() < stop_wait / 2 {
            assert!(producer.not_due_for().is_some(), "FED 2 taken as stopped");
        }
        senders[1].send(&fed_fragment(2, 1)).unwrap();
        let sent = Instant::now();
        while producer.not_due_for().is_some() {
            assert!(sent.elapsed() < Duration::from_secs(5));
        }
        let (_, sf) = producer.take();
        assert_eq!((sf.event, sf.bad_feds), (1, 0));
        // FED 2 stops while FED 1 sends on, then both are silent: when FED 1 sends again,
        // FED 2 is still stopped, its fragments missing at once.
        let mut take = |event: u64, within: Duration| {
            senders[0].send(&fed_fragment(1, event)).unwrap();
            let sent = Instant::now();
            while producer.not_due_for().is_some() {
                assert!(sent.elapsed() < within, "event {event}: FED 2 waited for");
            }
            let (_, sf) = producer.take();
            assert_eq!((sf.event, sf.bad_feds), (event, 1));
        };
        take(2, Duration::from_secs(5));
        take(3, stop_wait / 2);
        std::thread::sleep(2 * stop_wait);
        take(4, stop_wait / 2);
    }

    /// One datagram per fragment on 127.0.0.1; FED 2 sends nothing after event 3 and is
    /// taken as stopped after `stop_wait`, without holding events up for longer.
    #[test]
    fn udp_fragments_are_placed_and_a_silent_fed_is_missing() {
        let stop_wait = Duration::from_millis(50);
        let (mut producer, senders) = udp_feds(stop_wait);
        for event in 1..=6u64 {
            for (sender, fed) in senders.iter().zip([1u16, 2]) {
                if fed == 2 && event > 3 {
                    continue;
                }
                sender.send(&fed_fragment(fed, event)).unwrap();
            }
        }
        let started = Instant::now();
        for event in 1..=6u64 {
            let waited = Instant::now();
            while producer.not_due_for().is_some() {
                assert!(waited.elapsed() < Duration::from_secs(5), "event {event}");
            }
            let (_, sf) = producer.take();
            assert_eq!((sf.event, sf.bad_feds), (event, u16::from(event > 3)));
        }
        // One stop wait for the silent FED (plus the receive time-outs), not one per event.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let counts = producer.fed_counts();
        assert_eq!((counts[0].good, counts[1].good), (6, 3));
        assert_eq!(counts[1].failed(crate::check::FedCheckFailure::Missing), 3);
        assert_eq!(counts[0].ingest.fragments, 6);
    }
}

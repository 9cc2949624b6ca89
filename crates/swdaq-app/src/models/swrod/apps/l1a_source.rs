//! Where the HLT supervisor's L1 accepts come from. With emulated cards, from the L1A clock
//! at the run's rate: the cards follow the same clock, so the L1 IDs agree by construction.
//! With cards published by FELIX servers, from card 0's TTC-to-host e-link: the server's
//! card makes the L1 accepts, and its TTC records stand for the central trigger's path to
//! the HLT supervisor. That source is held by not reading it: TCP's flow control then holds
//! the server's card, as a busy holds the trigger (a server drops a subscriber that takes
//! nothing for its write time-out, 10 s).

use crate::models::swrod::config::{SwrodInputKind, SwrodSettings};
use crate::models::swrod::inputs::check_card;
use crate::models::swrod::readout::server_address;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use swdaq_format::felix::{TTC_TO_HOST_ELINK, TtcRecord};
use swdaq_swrod::net::subscriber::{Intake, IntakeCounts, Subscriber};
use swdaq_swrod::trigger::{L1Accept, TtcDecoder};

/// The shortest wait between looks at the clock: L1 accepts go out in batches of about
/// this much time.
const TICK: Duration = Duration::from_millis(1);

/// What the source has for the run's next L1 accept.
pub(super) enum Next {
    Due(L1Accept),
    /// Not yet: look again after this long.
    Wait(Duration),
    /// No more L1 accepts will come (the server ended, or its connection is lost for good).
    Ended,
}

pub(super) enum L1aSource {
    Clock(L1aClock),
    Ttc(Box<TtcFeed>),
}

impl L1aSource {
    /// The source for `s`'s input; a FELIX server is subscribed to now (before the run
    /// starts, so no L1 accept of its card is missed), trying until `give_up` says so.
    pub(super) fn new(s: &SwrodSettings, give_up: impl Fn() -> bool) -> anyhow::Result<Self> {
        if s.input.kind != SwrodInputKind::Tcp {
            return Ok(Self::Clock(L1aClock::new(s.l1a_rate_hz)));
        }
        let subscriber = Subscriber::connect(
            server_address(s, 0)?,
            &[TTC_TO_HOST_ELINK],
            Duration::from_secs_f64(s.input.connect_timeout_s),
            Duration::from_secs_f64(s.input.reconnect_s),
            give_up,
        )?;
        check_card(&subscriber, 0, s)?;
        Ok(Self::Ttc(Box::new(TtcFeed {
            subscriber,
            decoder: TtcDecoder::default(),
            records: VecDeque::new(),
            ended: false,
            ended_early: None,
        })))
    }

    /// The run's `index`-th L1 accept (from 0), the run having begun at `started`.
    pub(super) fn next(
        &mut self,
        index: u64,
        now: Instant,
        s: &SwrodSettings,
        started: Instant,
    ) -> Next {
        match self {
            Self::Clock(clock) => {
                let wait = clock.due_in(index, now);
                if wait.is_zero() {
                    Next::Due(L1Accept::counted(
                        index,
                        s.felix.ecr_every,
                        s.lumi_block_length(),
                        started,
                    ))
                } else {
                    Next::Wait(wait.max(TICK))
                }
            }
            Self::Ttc(feed) => match feed.front() {
                Some(record) => {
                    Next::Due(L1Accept::of(record, index, s.lumi_block_length(), started))
                }
                None if feed.ended => Next::Ended,
                // The read itself waited for data.
                None => Next::Wait(Duration::ZERO),
            },
        }
    }

    /// The L1 accept `next` gave was given out.
    pub(super) fn taken(&mut self) {
        if let Self::Ttc(feed) = self {
            feed.records.pop_front();
        }
    }

    /// Holds the clock (paused, or busy); a TTC feed is held by not being read.
    pub(super) fn hold(&mut self, now: Instant) {
        if let Self::Clock(clock) = self {
            clock.hold(now);
        }
    }

    pub(super) fn release(&mut self, now: Instant) {
        if let Self::Clock(clock) = self {
            clock.release(now);
        }
    }

    /// Why the TTC subscription ended before its server's `End` (lost for good, refused).
    pub(super) fn ended_early(&self) -> Option<String> {
        match self {
            Self::Clock(_) => None,
            Self::Ttc(feed) => feed.ended_early.clone(),
        }
    }

    /// The TTC subscription's counts, and the TTC records lost or broken.
    pub(super) fn intake(&self) -> Option<(IntakeCounts, u64)> {
        match self {
            Self::Clock(_) => None,
            Self::Ttc(feed) => Some((
                feed.subscriber.counts,
                feed.decoder.problems() + feed.decoder.malformed,
            )),
        }
    }
}

/// The L1A clock: L1 accept `n` (from 0) is due `n / rate` after the start, later by every
/// time the clock was held (paused, or busy).
pub(super) struct L1aClock {
    period_s: Option<f64>,
    origin: Instant,
    held_since: Option<Instant>,
}

impl L1aClock {
    fn new(rate_hz: f64) -> Self {
        Self {
            period_s: (rate_hz > 0.0).then(|| 1.0 / rate_hz),
            origin: Instant::now(),
            held_since: None,
        }
    }

    fn hold(&mut self, now: Instant) {
        self.held_since.get_or_insert(now);
    }

    fn release(&mut self, now: Instant) {
        if let Some(since) = self.held_since.take() {
            self.origin += now - since;
        }
    }

    /// How long until L1 accept `n` is due (zero: it is).
    fn due_in(&self, n: u64, now: Instant) -> Duration {
        match (self.held_since, self.period_s) {
            (Some(_), _) => Duration::MAX,
            (None, None) => Duration::ZERO,
            (None, Some(p)) => {
                (self.origin + Duration::from_secs_f64(n as f64 * p)).saturating_duration_since(now)
            }
        }
    }
}

/// Card 0's TTC records as its FELIX server publishes them.
pub(super) struct TtcFeed {
    subscriber: Subscriber,
    decoder: TtcDecoder,
    records: VecDeque<TtcRecord>,
    ended: bool,
    ended_early: Option<String>,
}

impl TtcFeed {
    /// The next record, read from the server if none is waiting (for up to the subscriber's
    /// poll time).
    fn front(&mut self) -> Option<TtcRecord> {
        if self.records.is_empty() && !self.ended {
            let Self {
                subscriber,
                decoder,
                records,
                ..
            } = self;
            match subscriber.receive() {
                Ok(Intake::Blocks(blocks)) => decoder.decode(blocks, |r| records.push_back(r)),
                Ok(Intake::Idle) => {}
                Ok(Intake::End(_)) => {
                    self.ended_early = self.subscriber.given_up().map(str::to_owned);
                    self.ended = true;
                }
                Err(e) => {
                    self.ended_early = Some(e.to_string());
                    self.ended = true;
                }
            }
        }
        self.records.front().copied()
    }
}

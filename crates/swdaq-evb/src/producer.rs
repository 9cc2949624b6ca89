//! A readout unit's input: its FEDs (emulated), paced by the trigger clock, read and
//! checked into super-fragments.

use crate::check::{FedCounts, SuperFragmentBuilder};
use crate::message::SuperFragment;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use swdaq_sim::fed::{FedConfigError, FedEmulator, FedEvent, FedFault, FedFaultKind, FedSimConfig};

pub struct Producer {
    emulator: FedEmulator,
    builder: SuperFragmentBuilder,
    event: FedEvent,
    generated: bool,
    faults: Vec<FedFault>,
    injected: BTreeMap<(u16, FedFaultKind), u64>,
    start: Instant,
    paced: bool,
}

impl Producer {
    /// `start` is the run's time zero on the trigger clock, shared by every readout unit.
    pub fn new(
        ru: u16,
        config: FedSimConfig,
        start: Instant,
        paced: bool,
    ) -> Result<Self, FedConfigError> {
        let feds = config.feds.iter().map(|f| f.id).collect();
        Ok(Self {
            emulator: FedEmulator::new(config)?,
            builder: SuperFragmentBuilder::new(ru, feds),
            event: FedEvent::default(),
            generated: false,
            faults: Vec::new(),
            injected: BTreeMap::new(),
            start,
            paced,
        })
    }

    /// The next event's number and trigger time; its FEDs send it now if they have not.
    pub fn peek(&mut self) -> (u64, u64) {
        if !self.generated {
            self.faults.clear();
            self.emulator.next_event(&mut self.event, &mut self.faults);
            self.generated = true;
        }
        (self.event.event, self.event.trigger_ns)
    }

    /// How long until the next event's trigger time, if paced and not yet due.
    pub fn not_due_for(&mut self) -> Option<Duration> {
        let (_, trigger_ns) = self.peek();
        if !self.paced {
            return None;
        }
        let due = self.start + Duration::from_nanos(trigger_ns);
        due.checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// How far the next event is behind its trigger time (zero when not paced or not due).
    pub fn behind(&mut self) -> Duration {
        let (_, trigger_ns) = self.peek();
        if !self.paced {
            return Duration::ZERO;
        }
        (self.start + Duration::from_nanos(trigger_ns)).elapsed()
    }

    /// Checks the next event's fragments into its super-fragment and moves on.
    pub fn take(&mut self) -> (u64, SuperFragment) {
        let (_, trigger_ns) = self.peek();
        self.generated = false;
        // Faults count as injected once their event is read (not merely looked ahead at).
        for f in &self.faults {
            *self.injected.entry((f.fed, f.kind)).or_default() += 1;
        }
        (trigger_ns, self.builder.build(&self.event))
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

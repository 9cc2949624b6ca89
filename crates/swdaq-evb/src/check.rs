//! A readout unit's checks of its FEDs' fragments, one event at a time, and the
//! super-fragment built from the fragments that pass. Each failure is counted once per FED,
//! by the first check it fails, in this order: missing, malformed (markers, size), bad length
//! (trailer length against the size received), wrong source id, wrong level-1 id, bad CRC.
//!
//! Which fragment is event N's is decided on the FED's link by its level-1 id
//! ([`crate::fed_link::place`], tests there and in `producer`), so each fault still ends in
//! exactly one counter:
//! * a missing fragment: the link's next one is numbered N + 1 (or starts a run further on):
//!   `missing`, and the next fragment waits for its own event;
//! * a wrong level-1 id: the fragment is N's when its successor is N + 1 (or its id is far
//!   off): `wrong_l1_id`; a record whose successor is N is a stray, counted by the first
//!   check it fails for N and part of no event;
//! * a stopped FED: a source that ended, or a stream with nothing for `stop_wait` while an
//!   event waits for it, makes each later event `missing` at once (it never stalls the unit);
//! * a truncated record (a file cut short): the read fails, the link ends (its `truncated`
//!   ingest count) and that event's and every later fragment is `missing`; a garbage record
//!   or one larger than a slot (its `oversized` ingest count, kept empty): `malformed`.
//!
//! A readout unit's input ends when every FED's source has ended and every fragment is
//! placed: events after that are not read, so trailing events missing from all its FEDs
//! (or whose last fragment was misnumbered, and so placed in an earlier event) are not
//! built. A placement can also swap two faults' events (a missing N and a misnumbered N + 1
//! count as a misnumbered N and a missing N + 1): counts by kind stay exact.

use crate::fed_link::FedIngestCounts;
use crate::message::SuperFragment;
use swdaq_format::FormatError;
use swdaq_format::fed::{FED_L1_ID_MASK, FedFragment};
use swdaq_sim::fed::FedEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FedCheckFailure {
    Missing,
    Malformed,
    BadLength,
    WrongSourceId,
    WrongL1Id,
    BadCrc,
}

impl FedCheckFailure {
    pub const ALL: [Self; 6] = [
        Self::Missing,
        Self::Malformed,
        Self::BadLength,
        Self::WrongSourceId,
        Self::WrongL1Id,
        Self::BadCrc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::BadLength => "bad_length",
            Self::WrongSourceId => "wrong_source_id",
            Self::WrongL1Id => "wrong_l1_id",
            Self::BadCrc => "bad_crc",
        }
    }
}

/// Counts of one FED.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FedCounts {
    pub good: u64,
    pub bytes: u64,
    /// Indexed like [`FedCheckFailure::ALL`].
    pub failures: [u64; 6],
    /// What the FED's link took in, before the checks.
    pub ingest: FedIngestCounts,
}

impl FedCounts {
    pub fn failed(&self, failure: FedCheckFailure) -> u64 {
        self.failures[failure as usize]
    }
}

/// Checks one fragment that came on the link of FED `fed` for event `event`.
pub fn check_fragment(fed: u16, event: u64, bytes: &[u8]) -> Result<(), FedCheckFailure> {
    let fragment = FedFragment::parse(bytes).map_err(|e| match e {
        FormatError::Inconsistent {
            field: "trailer length",
            ..
        } => FedCheckFailure::BadLength,
        _ => FedCheckFailure::Malformed,
    })?;
    if fragment.header.source_id != fed {
        return Err(FedCheckFailure::WrongSourceId);
    }
    if fragment.header.l1_id != (event as u32) & FED_L1_ID_MASK {
        return Err(FedCheckFailure::WrongL1Id);
    }
    if !fragment.crc_ok() {
        return Err(FedCheckFailure::BadCrc);
    }
    Ok(())
}

/// Checks every fragment of an event from the readout unit's FEDs and builds its
/// super-fragment from those that pass.
pub struct SuperFragmentBuilder {
    ru: u16,
    feds: Vec<u16>,
    counts: Vec<FedCounts>,
}

impl SuperFragmentBuilder {
    pub fn new(ru: u16, feds: Vec<u16>) -> Self {
        let counts = vec![FedCounts::default(); feds.len()];
        Self { ru, feds, counts }
    }

    pub fn feds(&self) -> &[u16] {
        &self.feds
    }

    /// Counts per FED, in the order of [`SuperFragmentBuilder::feds`].
    pub fn counts(&self) -> &[FedCounts] {
        &self.counts
    }

    /// Checks and counts FED number `index`'s fragment of `event` (`None`: missing) and
    /// appends it to `data` if it passes; true if it did.
    pub fn add(
        &mut self,
        index: usize,
        event: u64,
        fragment: Option<&[u8]>,
        data: &mut Vec<u8>,
    ) -> bool {
        let counts = &mut self.counts[index];
        let verdict = match fragment {
            None => Err(FedCheckFailure::Missing),
            Some(bytes) => check_fragment(self.feds[index], event, bytes).map(|()| bytes),
        };
        match verdict {
            Ok(bytes) => {
                counts.good += 1;
                counts.bytes += bytes.len() as u64;
                data.extend_from_slice(bytes);
                true
            }
            Err(failure) => {
                counts.failures[failure as usize] += 1;
                false
            }
        }
    }

    /// Counts a stray record on FED number `index`'s link (part of no event, found while
    /// placing `event`) by the first check it fails.
    pub fn stray(&mut self, index: usize, event: u64, bytes: &[u8]) {
        let failure = check_fragment(self.feds[index], event, bytes)
            .err()
            .unwrap_or(FedCheckFailure::WrongL1Id);
        self.counts[index].failures[failure as usize] += 1;
    }

    pub fn ru(&self) -> u16 {
        self.ru
    }

    /// FED number `index`'s ingest counts, written by its link.
    pub fn ingest_mut(&mut self, index: usize) -> &mut FedIngestCounts {
        &mut self.counts[index].ingest
    }

    /// Checks the fragments of an emulated event (all of this unit's FEDs, in one buffer)
    /// into its super-fragment.
    pub fn build(&mut self, event: &FedEvent) -> SuperFragment {
        let mut data = Vec::with_capacity(event.bytes.len());
        let mut bad_feds = 0;
        let mut sent = event.fragments.iter().peekable();
        for index in 0..self.feds.len() {
            let fed = self.feds[index];
            let fragment = sent
                .next_if(|(id, _)| *id == fed)
                .map(|(_, range)| &event.bytes[range.clone()]);
            bad_feds += u16::from(!self.add(index, event.event, fragment, &mut data));
        }
        SuperFragment {
            ru: self.ru,
            event: event.event,
            bad_feds,
            data,
        }
    }
}

/// FEDs 10..14 of 512-byte fragments with each fault kind at `rate` and FED 12 stopping at
/// event 900: the fixture of the tests that every fault ends in one counter.
#[cfg(test)]
pub(crate) fn four_feds_with_every_fault(rate: f64) -> swdaq_sim::fed::FedSimConfig {
    use swdaq_sim::fed::{FedFaultRates, FedSimConfig};
    FedSimConfig {
        feds: FedSimConfig::uniform(10, 4, 512, 64),
        trigger_rate_hz: 100e3,
        poisson: false,
        seed: 3,
        faults: FedFaultRates {
            missing: rate,
            wrong_l1_id: rate,
            bad_crc: rate,
            bad_length: rate,
            stops: vec![(12, 900)],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_sim::fed::{FedEmulator, FedFaultKind};

    /// Every injected fault ends in exactly one failure counter of its FED.
    #[test]
    fn each_injected_fault_is_counted_once() {
        let mut emu = FedEmulator::new(four_feds_with_every_fault(0.02)).unwrap();
        let mut builder = SuperFragmentBuilder::new(0, vec![10, 11, 12, 13]);
        let (mut event, mut truth) = (FedEvent::default(), Vec::new());
        let mut bad = 0;
        for _ in 0..1000 {
            emu.next_event(&mut event, &mut truth);
            let sf = builder.build(&event);
            bad += sf.bad_feds as u64;
            let mut rest = &sf.data[..];
            while !rest.is_empty() {
                let (f, before) = FedFragment::parse_last(rest).unwrap();
                assert_eq!(f.header.l1_id, event.event as u32);
                rest = before;
            }
        }
        assert_eq!(bad, truth.len() as u64);
        for (i, fed) in [10u16, 11, 12, 13].into_iter().enumerate() {
            let of = |kinds: &[FedFaultKind]| {
                truth
                    .iter()
                    .filter(|f| f.fed == fed && kinds.contains(&f.kind))
                    .count() as u64
            };
            let c = builder.counts()[i];
            assert_eq!(
                c.failed(FedCheckFailure::Missing),
                of(&[FedFaultKind::Missing, FedFaultKind::Stopped])
            );
            assert_eq!(
                c.failed(FedCheckFailure::WrongL1Id),
                of(&[FedFaultKind::WrongL1Id])
            );
            assert_eq!(
                c.failed(FedCheckFailure::BadCrc),
                of(&[FedFaultKind::BadCrc])
            );
            assert_eq!(
                c.failed(FedCheckFailure::BadLength),
                of(&[FedFaultKind::BadLength])
            );
            assert_eq!(
                c.failed(FedCheckFailure::Malformed) + c.failed(FedCheckFailure::WrongSourceId),
                0
            );
            assert_eq!(c.good + c.failures.iter().sum::<u64>(), 1000);
        }
        assert!(builder.counts()[2].failed(FedCheckFailure::Missing) >= 101);
    }

    #[test]
    fn fragment_on_the_wrong_link_is_wrong_source() {
        let mut out = Vec::new();
        let header = swdaq_format::fed::FedHeader {
            l1_id: 5,
            source_id: 7,
            ..Default::default()
        };
        swdaq_format::fed::encode_fed_fragment(&mut out, &header, &Default::default(), &[0; 8]);
        assert_eq!(check_fragment(7, 5, &out), Ok(()));
        assert_eq!(
            check_fragment(8, 5, &out),
            Err(FedCheckFailure::WrongSourceId)
        );
        assert_eq!(check_fragment(7, 6, &out), Err(FedCheckFailure::WrongL1Id));
        assert_eq!(
            check_fragment(7, 5, &out[8..]),
            Err(FedCheckFailure::Malformed)
        );
    }
}

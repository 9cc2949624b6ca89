//! Building events from super-fragments: one slot per readout unit, complete when every
//! slot is filled with all its FEDs, flagged incomplete with the missing readout units named
//! when the time-out passes first (or the run ends). Every super-fragment must carry the
//! event's id, and so must every FED fragment in it; one that does not is counted and left
//! out, which makes its readout unit missing. An event lacking a FED (its fragment never came,
//! or a readout unit's check left it out) is incomplete too: a reader of the file finds the
//! FED absent, as CMS's builder unit counts such an event "missing data" from the FED ids the
//! readout unit says it dropped (mommsen/evb `readoutunit/BUproxy.h`,
//! `fillSuperFragmentHeader`; `bu/EventBuilder` `nbEventsMissingData`). The built event is an FRD v6 event: header with CRC32C, then the
//! FED fragments. An event none of whose FED fragments passed the readout units' checks holds
//! nothing the detector sent (garbage, or every FED silent): it is counted `no_data` and
//! never handed on to be written. It is built in place: the header is computed over the super-fragments
//! where they arrived (CRC32C over the pieces), and the writer writes header and pieces with
//! one vectored write, so an event's bytes are never copied into one buffer.

use crate::message::SuperFragment;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use swdaq_format::crc::crc32c_iov;
use swdaq_format::fed::{FED_L1_ID_MASK, fed_fragments};
use swdaq_format::frd::{FRD_EVENT_HEADER_SIZE, FrdEventHeader, frd_flags};

#[derive(Debug)]
pub struct BuiltEvent {
    pub event: u64,
    pub lumi: u32,
    /// FRD event header; the payload is `parts`' data in order.
    pub header: [u8; FRD_EVENT_HEADER_SIZE],
    /// The super-fragments that went into the event, in readout-unit order.
    pub parts: Vec<SuperFragment>,
    /// Readout units whose super-fragment never came (or came for another event).
    pub missing_rus: Vec<u16>,
    /// FEDs left out by the readout units' checks.
    pub bad_feds: u32,
    /// From assignment to built.
    pub build_time: Duration,
}

impl BuiltEvent {
    /// The event's bytes in file order: its header, then each super-fragment's fragments.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.header[..]).chain(self.parts.iter().map(|p| &p.data[..]))
    }

    /// Header and payload bytes.
    pub fn size(&self) -> usize {
        self.pieces().map(<[u8]>::len).sum()
    }

    /// A complete event of one super-fragment holding `payload`, as the builder would make
    /// it (for the file and farm tests).
    #[cfg(test)]
    pub(crate) fn of_payload(run: u32, lumi: u32, event: u64, payload: Vec<u8>) -> Self {
        let header = FrdEventHeader {
            run,
            lumi,
            event: event as u32,
            event_size: payload.len() as u32,
            crc32c: swdaq_format::crc::crc32c(&payload),
            ..Default::default()
        };
        Self {
            event,
            lumi,
            header: header.to_bytes(),
            parts: vec![SuperFragment {
                ru: 0,
                event,
                bad_feds: 0,
                data: payload,
            }],
            missing_rus: vec![],
            bad_feds: 0,
            build_time: Duration::ZERO,
        }
    }

    /// The event as one buffer (tests and tools; the writer writes the pieces).
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces().collect::<Vec<_>>().concat()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuildCounts {
    pub complete: u64,
    /// Events lacking a readout unit or a FED, flagged `INCOMPLETE` in their FRD header.
    pub incomplete: u64,
    /// Super-fragments that never came, per readout unit.
    pub missing_per_ru: Vec<u64>,
    /// Super-fragments (or FED fragments in them) carrying another event's id.
    pub wrong_event_id: u64,
    /// Super-fragments for events not being built (already timed out, or never assigned).
    pub late: u64,
    /// A second super-fragment from the same readout unit for the same event.
    pub duplicate: u64,
    /// Events with FEDs left out by the readout units.
    pub with_bad_feds: u64,
    /// Events with no FED fragment that passed the checks: not built into a file.
    pub no_data: u64,
    pub bytes: u64,
}

struct Building {
    lumi: u32,
    started: Instant,
    parts: Vec<Option<SuperFragment>>,
    arrived: usize,
}

pub struct EventBuilder {
    run: u32,
    readout_units: usize,
    timeout: Duration,
    building: BTreeMap<u64, Building>,
    /// (deadline, event) in start order, so deadlines ascend: expiry looks at the front only
    /// instead of scanning every open event on each wake-up. Events completed meanwhile are
    /// skipped when they reach the front.
    deadlines: VecDeque<(Instant, u64)>,
    counts: BuildCounts,
}

impl EventBuilder {
    pub fn new(run: u32, readout_units: usize, timeout: Duration) -> Self {
        Self {
            run,
            readout_units,
            timeout,
            building: BTreeMap::new(),
            deadlines: VecDeque::new(),
            counts: BuildCounts {
                missing_per_ru: vec![0; readout_units],
                ..Default::default()
            },
        }
    }

    pub fn counts(&self) -> &BuildCounts {
        &self.counts
    }

    /// Events being built.
    pub fn open(&self) -> usize {
        self.building.len()
    }

    /// The lumi section of the oldest event being built: events are numbered in trigger
    /// order, so no event being built belongs to an earlier one.
    pub fn oldest_open_lumi(&self) -> Option<u32> {
        self.building.first_key_value().map(|(_, b)| b.lumi)
    }

    /// Starts building `event` with the event manager's super-fragment; returns it built
    /// when that is all there is.
    pub fn start(
        &mut self,
        event: u64,
        lumi: u32,
        evm_fragment: SuperFragment,
        now: Instant,
    ) -> Option<BuiltEvent> {
        let building = Building {
            lumi,
            started: now,
            parts: vec![None; self.readout_units],
            arrived: 0,
        };
        self.building.insert(event, building);
        self.deadlines.push_back((now + self.timeout, event));
        self.add(event, evm_fragment, now)
    }

    /// Adds a readout unit's super-fragment; returns the event when it is complete.
    pub fn add(&mut self, event: u64, fragment: SuperFragment, now: Instant) -> Option<BuiltEvent> {
        let Some(building) = self.building.get_mut(&event) else {
            self.counts.late += 1;
            return None;
        };
        match building.parts.get_mut(fragment.ru as usize) {
            Some(slot) if slot.is_none() => {
                *slot = Some(fragment);
                building.arrived += 1;
            }
            _ => {
                self.counts.duplicate += 1;
                return None;
            }
        }
        if building.arrived < self.readout_units {
            return None;
        }
        let building = self.building.remove(&event).expect("just seen");
        self.assemble(event, building, now)
    }

    /// Completes, flagged incomplete, every event older than the time-out.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<BuiltEvent>) {
        while let Some(&(deadline, event)) = self.deadlines.front() {
            if !self.building.contains_key(&event) {
                self.deadlines.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            let building = self.building.remove(&event).expect("checked above");
            out.extend(self.assemble(event, building, now));
        }
    }

    /// The earliest moment an open event times out (or a little before: the front entry may
    /// be an event completed since).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|&(deadline, _)| deadline)
    }

    /// Completes every open event now (end of run), flagged incomplete.
    pub fn finish_all(&mut self, now: Instant, out: &mut Vec<BuiltEvent>) {
        self.deadlines.clear();
        for (event, building) in std::mem::take(&mut self.building) {
            out.extend(self.assemble(event, building, now));
        }
    }

    /// The event from its parts; `None` (counted `no_data`) when no FED fragment in them
    /// passed the checks.
    fn assemble(&mut self, event: u64, building: Building, now: Instant) -> Option<BuiltEvent> {
        // The CRC32C of every part first: it streams each byte into this core's cache, so the
        // fragment checks below, which jump from trailer to header, find theirs there.
        let crc_of_present = crc32c_iov(building.parts.iter().flatten().map(|p| &p.data[..]));
        let mut missing_rus = Vec::new();
        let mut bad_feds = 0u32;
        let mut parts = Vec::with_capacity(building.parts.len());
        for (ru, part) in building.parts.into_iter().enumerate() {
            match part {
                Some(p) if p.event == event && fragments_carry(&p.data, event) => {
                    bad_feds += p.bad_feds as u32;
                    parts.push(p);
                }
                Some(_) => {
                    self.counts.wrong_event_id += 1;
                    missing_rus.push(ru as u16);
                }
                None => {
                    self.counts.missing_per_ru[ru] += 1;
                    missing_rus.push(ru as u16);
                }
            }
        }
        let payload_size: usize = parts.iter().map(|p| p.data.len()).sum();
        // Every good FED fragment has a header and trailer: an empty payload has none.
        if payload_size == 0 {
            self.counts.no_data += 1;
            return None;
        }
        let incomplete = !missing_rus.is_empty() || bad_feds > 0;
        let header = FrdEventHeader {
            flags: if incomplete { frd_flags::INCOMPLETE } else { 0 },
            run: self.run,
            lumi: building.lumi,
            // The FRD header carries 32 bits of the event number.
            event: event as u32,
            event_size: payload_size as u32,
            crc32c: if parts.len() == building.arrived {
                crc_of_present
            } else {
                crc32c_iov(parts.iter().map(|p| &p.data[..]))
            },
        };
        if incomplete {
            self.counts.incomplete += 1;
        } else {
            self.counts.complete += 1;
        }
        self.counts.with_bad_feds += u64::from(bad_feds > 0);
        self.counts.bytes += (FRD_EVENT_HEADER_SIZE + payload_size) as u64;
        Some(BuiltEvent {
            event,
            lumi: building.lumi,
            header: header.to_bytes(),
            parts,
            missing_rus,
            bad_feds,
            build_time: now.saturating_duration_since(building.started),
        })
    }
}

/// Whether every FED fragment in `data` (read backwards from the last trailer) carries `event`.
fn fragments_carry(data: &[u8], event: u64) -> bool {
    let l1_id = (event as u32) & FED_L1_ID_MASK;
    fed_fragments(data).all(|f| f.is_ok_and(|(_, f)| f.header.l1_id == l1_id))
}

/// Readout unit `ru`'s super-fragment of `event`: two good FED fragments (ids `ru` * 10 and
/// `ru` * 10 + 1) numbered `l1` (tests of the builder and what it feeds).
#[cfg(test)]
pub(crate) fn test_part(ru: u16, event: u64, l1: u32) -> SuperFragment {
    use swdaq_format::fed::{FedHeader, encode_fed_fragment};
    let mut data = Vec::new();
    for fed in 0..2u16 {
        let header = FedHeader {
            l1_id: l1,
            source_id: ru * 10 + fed,
            ..Default::default()
        };
        encode_fed_fragment(&mut data, &header, &Default::default(), &[ru as u8; 64]);
    }
    SuperFragment {
        ru,
        event,
        bad_feds: 0,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swdaq_format::frd::FrdEvent;
    use test_part as part;

    #[test]
    fn complete_event_has_crc_and_every_fragment() {
        let now = Instant::now();
        let mut b = EventBuilder::new(5, 3, Duration::from_millis(10));
        assert!(b.start(7, 1, part(0, 7, 7), now).is_none());
        assert!(b.add(7, part(2, 7, 7), now).is_none());
        let built = b.add(7, part(1, 7, 7), now).unwrap();
        let bytes = built.to_vec();
        let (frd, rest) = FrdEvent::parse_first(&bytes).unwrap();
        assert!(rest.is_empty() && frd.crc_ok());
        assert_eq!(
            (frd.header.run, frd.header.event, frd.header.flags),
            (5, 7, 0)
        );
        assert_eq!(frd.payload.len(), 3 * 2 * (16 + 64));
        assert_eq!(b.counts().complete, 1);
        assert_eq!(b.open(), 0);
    }

    #[test]
    fn time_out_names_the_missing_unit_and_late_parts_are_counted() {
        let t0 = Instant::now();
        let mut b = EventBuilder::new(1, 3, Duration::from_millis(10));
        b.start(1, 1, part(0, 1, 1), t0);
        b.add(1, part(1, 1, 1), t0);
        let mut out = Vec::new();
        b.expire(t0 + Duration::from_millis(5), &mut out);
        assert!(out.is_empty());
        b.expire(t0 + Duration::from_millis(10), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].missing_rus, vec![2]);
        let bytes = out[0].to_vec();
        let frd = FrdEvent::parse_first(&bytes).unwrap().0;
        assert_eq!(frd.header.flags, frd_flags::INCOMPLETE);
        assert!(frd.crc_ok());
        assert_eq!(b.counts().missing_per_ru, vec![0, 0, 1]);
        assert!(b.add(1, part(2, 1, 1), t0).is_none());
        assert_eq!(b.counts().late, 1);
    }

    #[test]
    fn wrong_ids_and_duplicates_are_counted_never_merged() {
        let t0 = Instant::now();
        let mut b = EventBuilder::new(1, 3, Duration::from_millis(10));
        b.start(4, 1, part(0, 4, 4), t0);
        assert!(b.add(4, part(0, 4, 4), t0).is_none());
        assert_eq!(b.counts().duplicate, 1);
        b.add(4, part(1, 9, 4), t0); // super-fragment of another event
        let built = b.add(4, part(2, 4, 5), t0).unwrap(); // FED fragments of another event
        assert_eq!(built.missing_rus, vec![1, 2]);
        assert_eq!(b.counts().wrong_event_id, 2);
        // The CRC32C covers what was kept, not every part that arrived.
        let frd_bytes = built.to_vec();
        let frd = FrdEvent::parse_first(&frd_bytes).unwrap().0;
        assert!(frd.crc_ok() && frd.payload == part(0, 4, 4).data);
        let mut out = Vec::new();
        b.start(5, 1, part(0, 5, 5), t0);
        b.finish_all(t0, &mut out);
        assert_eq!(out[0].missing_rus, vec![1, 2]);
        assert_eq!((b.counts().complete, b.counts().incomplete), (0, 2));
    }

    /// An event whose every FED fragment failed its checks (each readout unit answered with
    /// nothing good), or whose only answers were left out, holds nothing the detector sent:
    /// counted, never handed on to be written.
    #[test]
    fn an_event_with_no_good_fed_fragment_is_counted_and_not_built() {
        let t0 = Instant::now();
        let mut b = EventBuilder::new(1, 2, Duration::from_millis(10));
        let nothing = |ru, event| SuperFragment {
            ru,
            event,
            bad_feds: 2,
            data: Vec::new(),
        };
        assert!(b.start(3, 1, nothing(0, 3), t0).is_none());
        assert!(b.add(3, nothing(1, 3), t0).is_none());
        let mut out = Vec::new();
        b.start(4, 1, nothing(0, 4), t0);
        b.expire(t0 + Duration::from_millis(10), &mut out);
        b.start(5, 1, part(0, 5, 6), t0);
        b.finish_all(t0, &mut out);
        assert!(out.is_empty());
        let c = b.counts();
        assert_eq!((c.complete, c.incomplete, c.no_data), (0, 0, 3));
        assert_eq!((c.bytes, c.wrong_event_id), (0, 1));
    }

    /// Every readout unit answered, but one left a FED out (it never came, or failed a
    /// check): the event is written flagged incomplete and counted so, with the FED count.
    #[test]
    fn an_event_lacking_a_fed_is_flagged_and_counted_incomplete() {
        let t0 = Instant::now();
        let mut b = EventBuilder::new(1, 2, Duration::from_secs(1));
        let lacking = SuperFragment {
            bad_feds: 1,
            ..part(1, 7, 7)
        };
        assert!(b.start(7, 1, part(0, 7, 7), t0).is_none());
        let e = b.add(7, lacking, t0).expect("every readout unit answered");
        assert!(e.missing_rus.is_empty());
        assert_eq!(e.bad_feds, 1);
        let header = FrdEventHeader::parse(&e.header).unwrap();
        assert_ne!(header.flags & frd_flags::INCOMPLETE, 0);
        let whole = b.start(8, 1, part(0, 8, 8), t0);
        let whole = whole.or_else(|| b.add(8, part(1, 8, 8), t0)).unwrap();
        assert_eq!(FrdEventHeader::parse(&whole.header).unwrap().flags, 0);
        let c = b.counts();
        assert_eq!((c.complete, c.incomplete, c.with_bad_feds), (1, 1, 1));
    }
}

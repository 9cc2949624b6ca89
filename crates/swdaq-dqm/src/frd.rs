//! The event builder's histograms, from its FRD files: each FED's fragment size, the event
//! size, and how many FEDs each event holds. The binning is fixed, so any two runs' sets
//! compare.

use crate::hist::{Axis, Hist1};
use crate::set::HistSet;
use swdaq_format::FormatError;
use swdaq_format::fed::fed_fragments;
use swdaq_format::frd::{FrdEvent, FrdFile};

/// FED fragments up to 16 KiB in 128-byte bins (larger ones in the overflow).
const FED_SIZE_BINS: (usize, f64) = (128, 16384.0);
/// Events up to 256 KiB in 1 KiB bins.
const EVENT_SIZE_BINS: (usize, f64) = (256, 262_144.0);
const MAX_FEDS_PER_EVENT: usize = 64;

/// What a file gave: the events read, and why reading stopped early, if it did.
#[derive(Debug, Default)]
pub struct FrdRead {
    pub events: u64,
    pub problem: Option<String>,
}

/// Fills `set` from one FRD file's bytes; a damaged file is read up to its first bad event.
pub fn fill(set: &mut HistSet, bytes: &[u8]) -> Result<FrdRead, FormatError> {
    let file = FrdFile::parse(bytes)?;
    let mut read = FrdRead::default();
    for event in file.events() {
        match event {
            Ok(event) => {
                read.events += 1;
                fill_event(set, &event);
            }
            Err(e) => {
                read.problem = Some(e.to_string());
                break;
            }
        }
    }
    Ok(read)
}

/// Fills `set` from one FRD event: the one place the event builder's histograms are filled,
/// from a file's events (`swdaq dqm`) and from a running builder unit's samples alike.
pub fn fill_event(set: &mut HistSet, event: &FrdEvent) {
    set.events += 1;
    set.entry("event_size", || {
        histogram("event_size", "Event size", "event size", EVENT_SIZE_BINS)
    })
    .fill(event.header.event_size as f64);
    let mut feds = 0;
    for (_, fed) in fed_fragments(event.payload).map_while(Result::ok) {
        feds += 1;
        let id = fed.header.source_id;
        let name = format!("fed_size_{id:04}");
        set.entry(&name, || {
            histogram(
                &name,
                &format!("FED {id} fragment size"),
                "fragment size",
                FED_SIZE_BINS,
            )
        })
        .fill(fed.bytes.len() as f64);
    }
    set.entry("feds_per_event", || {
        let axis = Axis::new(
            "FEDs",
            "",
            MAX_FEDS_PER_EVENT,
            0.0,
            MAX_FEDS_PER_EVENT as f64,
        );
        Hist1::new("feds_per_event", "FEDs per event", axis).expect("a valid axis")
    })
    .fill(f64::from(feds));
}

/// Fills `set` from a sampled event's bytes (one FRD event, as a builder unit builds it).
pub fn fill_sample(set: &mut HistSet, bytes: &[u8]) -> Result<(), FormatError> {
    let (event, _) = FrdEvent::parse_first(bytes)?;
    fill_event(set, &event);
    Ok(())
}

fn histogram(name: &str, title: &str, quantity: &str, (bins, hi): (usize, f64)) -> Hist1 {
    Hist1::new(name, title, Axis::new(quantity, "bytes", bins, 0.0, hi)).expect("a valid axis")
}

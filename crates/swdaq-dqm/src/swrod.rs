//! The SW ROD's histograms, from its EventStorage files: each ROB's ROD data size, how often
//! each of its e-links was missing (the `MissingElinks` bitmask of its status words: a dead
//! e-link is a spike at its index), and the full events' sizes. Fixed binning, so any two
//! runs compare.

use crate::hist::{Axis, Hist1};
use crate::set::HistSet;
use swdaq_format::FormatError;
use swdaq_format::eformat::status;
use swdaq_format::eformat_event::FullEvent;
use swdaq_format::eventstorage::{FileHead, Record, Records};

/// ROD data up to 64 KiB in 256-byte bins.
const ROB_SIZE_BINS: (usize, f64) = (256, 65_536.0);
/// Full events up to 1 MiB in 4 KiB bins.
const EVENT_SIZE_BINS: (usize, f64) = (256, 1_048_576.0);
/// E-link indices within a ROB the missing-e-link map shows (the bitmask words beyond are
/// counted in its overflow).
const ELINK_MAP_BINS: usize = 256;

/// What a file gave: the events read, and the damaged spans skipped.
#[derive(Debug, Default)]
pub struct EventStorageRead {
    pub events: u64,
    pub problems: Vec<String>,
}

/// Fills `set` from one EventStorage file's bytes; damaged records and events are skipped
/// and named.
pub fn fill(set: &mut HistSet, bytes: &[u8]) -> Result<EventStorageRead, FormatError> {
    let (_, body) = FileHead::parse(bytes)?;
    let mut read = EventStorageRead::default();
    for record in Records::new(bytes, body) {
        let data = match record {
            Record::Event { data, .. } => data,
            Record::End { .. } => continue,
            Record::Damaged { offset, why, .. } => {
                read.problems.push(format!("byte {offset}: {why}"));
                continue;
            }
        };
        match fill_event(set, data) {
            Ok(()) => read.events += 1,
            Err(e) => read.problems.push(e.to_string()),
        }
    }
    Ok(read)
}

/// Fills `set` from one full event's bytes: the one place the SW ROD's histograms are
/// filled, from a file's events (`swdaq dqm`) and from a running SW ROD's samples alike.
pub fn fill_event(set: &mut HistSet, data: &[u8]) -> Result<(), FormatError> {
    let event = FullEvent::parse(data)?;
    set.events += 1;
    set.entry("event_size", || {
        bytes_histogram("event_size", "Full event size", EVENT_SIZE_BINS)
    })
    .fill(data.len() as f64);
    for rob in event.robs().map_while(Result::ok) {
        let id = rob.source_id;
        let name = format!("rob_data_size_{id:08x}");
        set.entry(&name, || {
            bytes_histogram(
                &name,
                &format!("ROB 0x{id:08x} ROD data size"),
                ROB_SIZE_BINS,
            )
        })
        .fill(rob.data.len() as f64);
        let mut words = rob.status();
        let missing = words
            .next()
            .is_some_and(|w| w & status::MISSING_ELINKS != 0);
        let name = format!("missing_elinks_{id:08x}");
        let map = set.entry(&name, || {
            let axis = Axis::new(
                "e-link of the ROB",
                "",
                ELINK_MAP_BINS,
                0.0,
                ELINK_MAP_BINS as f64,
            );
            Hist1::new(&name, &format!("ROB 0x{id:08x}: e-links missing"), axis)
                .expect("a valid axis")
                .of_counts()
        });
        if missing {
            for (w, word) in words.enumerate() {
                for bit in (0..32).filter(|b| word & (1 << b) != 0) {
                    map.fill((32 * w + bit) as f64);
                }
            }
        }
    }
    Ok(())
}

fn bytes_histogram(name: &str, title: &str, (bins, hi): (usize, f64)) -> Hist1 {
    Hist1::new(name, title, Axis::new("size", "bytes", bins, 0.0, hi)).expect("a valid axis")
}

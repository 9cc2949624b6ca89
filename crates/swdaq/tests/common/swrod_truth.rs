//! What a SW ROD test checks stored events against: every chunk the run's emulated cards
//! sent, replayed here from the same configuration, and the full events of an EventStorage
//! file, each whole.

use std::collections::HashMap;
use std::path::Path;
use swdaq_format::eventstorage::{FileHead, Record, Records};
use swdaq_sim::felix::{FelixCard, FelixConfig};
use swdaq_swrod::BlockDecoder;

/// Every whole chunk `cards` emulated cards sent in `l1as` L1 accepts: (card, e-link, L1 ID)
/// -> bytes, as the run's cards (seed + card) send them. Emulated in the run (no TTC-to-host
/// e-link), the last `clean_tail` L1 accepts are fault-free.
pub fn emulated_chunks(
    cards: u16,
    l1as: u64,
    felix: &FelixConfig,
    clean_tail: u64,
) -> HashMap<(u16, u16, u32), Vec<u8>> {
    let mut chunks = HashMap::new();
    let elinks: Vec<u16> = (0..felix.elinks).collect();
    for card in 0..cards {
        let mut emulator = FelixCard::new(FelixConfig {
            seed: felix.seed + u64::from(card),
            ..felix.clone()
        })
        .unwrap();
        let mut blocks = Vec::new();
        for i in 0..l1as {
            if !felix.ttc_to_host && i + clean_tail >= l1as {
                emulator.set_fault_rates(Default::default());
            }
            emulator.l1_accept(&mut blocks);
        }
        emulator.flush(&mut blocks);
        BlockDecoder::with_layout(emulator.layout(), &elinks).decode_blocks(
            &blocks,
            |e, chunk, _| {
                let l1_id = u32::from_le_bytes(chunk[0..4].try_into().unwrap());
                chunks.insert((card, e as u16, l1_id), chunk.to_vec());
            },
        );
    }
    chunks
}

/// The full events of the EventStorage file at `path`, each whole; a damaged record fails.
pub fn events_of(path: impl AsRef<Path>) -> Vec<Vec<u8>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).unwrap();
    let (_, body) = FileHead::parse(&bytes).unwrap();
    let mut events = Vec::new();
    for r in Records::new(&bytes, body) {
        match r {
            Record::Event { data, .. } => events.push(data.to_vec()),
            Record::End { .. } => {}
            Record::Damaged { why, .. } => panic!("{}: {why}", path.display()),
        }
    }
    events
}

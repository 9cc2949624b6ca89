//! Emulated FELIX card -> block decoder -> aggregation: fragments are right, and every
//! injected fault ends in exactly one counter.

use swdaq_format::eformat::{ChunkRecords, RobFragment, status};
use swdaq_sim::felix::{DeadElink, FelixCard, FelixConfig, FelixFaultKind, FelixFaults};
use swdaq_swrod::{
    Aggregator, AggregatorCounts, Allocation, BlockDecoder, DecoderCounts, ModuloIndex,
    PowerOfTwoIndex, RobConfig, SlotIndex,
};

struct Run {
    fragments: Vec<Vec<u8>>,
    decoder: DecoderCounts,
    aggregator: AggregatorCounts,
    elink_errors: Vec<u64>,
    card: FelixCard,
}

fn run<I: SlotIndex>(
    felix: FelixConfig,
    l1as: usize,
    clean_tail: usize,
    allocation: Allocation,
) -> Run {
    let rob = RobConfig {
        elinks: (0..felix.elinks).collect(),
        ring_slots: 256,
        timeout_fragments: 64,
        ..RobConfig::default()
    };
    let mut card = FelixCard::new(felix).unwrap();
    let mut blocks = Vec::new();
    for i in 0..l1as {
        if i == l1as - clean_tail {
            // The last L1 accepts carry no faults: a chunk lost in the very last one cannot
            // be told from an e-link going silent.
            card.set_fault_rates(FelixFaults::default());
        }
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let mut aggregator = Aggregator::<I>::new(rob, allocation).unwrap();
    let mut fragments = Vec::new();
    let mut out = |f: swdaq_swrod::BuiltFragment| fragments.push(f.bytes().to_vec());
    decoder.decode_blocks(&blocks, |e, chunk, trailer| {
        aggregator.add_chunk(e, chunk, trailer, &mut out)
    });
    aggregator.flush(&mut out);
    Run {
        fragments,
        decoder: decoder.counts,
        aggregator: aggregator.counts,
        elink_errors: aggregator.elink_errors.clone(),
        card,
    }
}

#[test]
fn clean_data_gives_one_complete_fragment_per_l1a() {
    let felix = FelixConfig {
        elinks: 24,
        chunk_min: 8,
        chunk_max: 100,
        ecr_every: 300,
        ..FelixConfig::default()
    };
    for allocation in [Allocation::Pool, Allocation::Heap] {
        let r = run::<PowerOfTwoIndex>(felix.clone(), 1000, 0, allocation);
        assert_eq!(r.fragments.len(), 1000);
        assert_eq!(r.aggregator.incomplete_fragments, 0);
        assert_eq!(r.aggregator.ecrs, 3);
        for (i, bytes) in r.fragments.iter().enumerate() {
            let f = RobFragment::parse(bytes).unwrap();
            let i = i as u32;
            assert_eq!(f.rod.l1_id, (i / 300) << 24 | (i % 300));
            assert_eq!(f.status().collect::<Vec<_>>(), vec![0]);
            let records: Vec<_> = ChunkRecords::new(f.data).map(Result::unwrap).collect();
            assert_eq!(records.len(), 24);
            for r in records {
                assert_eq!(&r.data[0..4], &f.rod.l1_id.to_le_bytes());
            }
        }
    }
    let modulo = run::<ModuloIndex>(felix, 1000, 0, Allocation::Pool);
    assert_eq!(modulo.fragments.len(), 1000);
}

#[test]
fn every_injected_fault_ends_in_exactly_one_counter() {
    let felix = FelixConfig {
        elinks: 48,
        seed: 11,
        ecr_every: 2000,
        faults: FelixFaults {
            missing_chunk: 0.001,
            truncated_chunk: 0.001,
            sequence_gap: 0.001,
            l1id_out_of_order: 0.001,
            dead_elinks: vec![DeadElink {
                elink: 17,
                after_l1as: 3000,
            }],
        },
        ..FelixConfig::default()
    };
    let l1as = 5000;
    let r = run::<PowerOfTwoIndex>(felix, l1as, 100, Allocation::Pool);
    let truth = |k| r.card.faults().iter().filter(|f| f.kind == k).count() as u64;
    let a = r.aggregator;
    assert!(truth(FelixFaultKind::MissingChunk) > 50);
    assert_eq!(a.missing_chunks, truth(FelixFaultKind::MissingChunk));
    assert_eq!(a.truncated_chunks, truth(FelixFaultKind::TruncatedChunk));
    assert_eq!(a.out_of_order_chunks, truth(FelixFaultKind::L1idOutOfOrder));
    assert_eq!(r.decoder.sequence_gaps, truth(FelixFaultKind::SequenceGap));
    assert_eq!(a.ecrs, truth(FelixFaultKind::Ecr));
    assert_eq!(a.elinks_silent, truth(FelixFaultKind::DeadElink));
    // Nothing else went wrong.
    assert_eq!(r.decoder.broken_chunks + r.decoder.corrupt_blocks, 0);
    assert_eq!(
        a.late_chunks
            + a.duplicate_chunks
            + a.malformed_chunks
            + a.bcid_mismatches
            + a.ring_collisions,
        0
    );
    assert_eq!(a.elinks_revived, 0);
    // Per e-link, the same problems add up, the dead e-link's among them.
    assert_eq!(
        r.elink_errors.iter().sum::<u64>(),
        a.missing_chunks + a.truncated_chunks + a.out_of_order_chunks + a.elinks_silent
    );
    assert!(r.elink_errors[17] >= 1);
    assert_eq!(r.fragments.len(), l1as);
    // The fragments name the missing e-links: the dead one in every fragment after it died.
    let mut missing_named = 0;
    for (i, bytes) in r.fragments.iter().enumerate() {
        let f = RobFragment::parse(bytes).unwrap();
        let words: Vec<u32> = f.status().collect();
        let records = ChunkRecords::new(f.data).count();
        if words[0] & status::MISSING_ELINKS != 0 {
            let named: u32 = words[1..].iter().map(|w| w.count_ones()).sum();
            assert_eq!(named as usize + records, 48);
            missing_named += u64::from(named);
            if i >= 3000 {
                assert_eq!(words[1] >> 17 & 1, 1, "dead e-link 17 not named at {i}");
            }
        } else {
            // Complete; a truncated chunk marks it corrupt.
            assert_eq!(words.len(), 1);
            assert_eq!(words[0] & !status::DATA_CORRUPTION, 0);
            assert_eq!(records, 48);
        }
    }
    assert_eq!(missing_named, a.missing_chunks + (l1as as u64 - 3000));
}

#[test]
fn a_restart_accepts_the_same_l1_ids_again() {
    let rob = RobConfig {
        elinks: (0..16).collect(),
        ring_slots: 256,
        timeout_fragments: 64,
        ..RobConfig::default()
    };
    let mut card = FelixCard::new(FelixConfig {
        elinks: 16,
        ..FelixConfig::default()
    })
    .unwrap();
    let mut blocks = Vec::new();
    for _ in 0..300 {
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Pool).unwrap();
    let mut complete = 0;
    let mut out = |f: swdaq_swrod::BuiltFragment| complete += usize::from(f.complete);
    for _ in 0..2 {
        decoder.decode_blocks(&blocks, |e, chunk, trailer| {
            aggregator.add_chunk(e, chunk, trailer, &mut out)
        });
        aggregator.restart(&mut out);
        decoder.restart();
    }
    assert_eq!(complete, 600);
    assert_eq!(
        aggregator.counts.late_chunks + decoder.counts.sequence_gaps,
        0
    );
}

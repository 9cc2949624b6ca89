//! The consumer chain: requests by L1 ID, recording, sampling, and slow consumers counted
//! without holding aggregation up.

use crossbeam_channel::unbounded;
use std::sync::Arc;
use std::time::Duration;
use swdaq_format::eformat::RobFragment;
use swdaq_format::rawfile::{RawFileHeader, RawFileReader, RawFileWriter};
use swdaq_format::{FragmentType, SourceId};
use swdaq_sim::felix::{FelixCard, FelixConfig};
use swdaq_swrod::consumers::{
    ConsumerChain, FragmentStore, PLAUSIBLE_AHEAD, RequestServer, RobRequest, RobRequestStatus,
    record, serve_requests,
};
use swdaq_swrod::{
    Aggregator, Allocation, BlockDecoder, BuiltFragment, PowerOfTwoIndex, RobConfig,
};

/// Builds `l1as` fragments of a small clean card and hands each to `out`.
fn build(l1as: usize, mut out: impl FnMut(BuiltFragment)) {
    let rob = RobConfig {
        elinks: (0..8).collect(),
        // The time-out must outlast a block's worth of L1 accepts (24 chunks of 40 bytes).
        ring_slots: 64,
        timeout_fragments: 48,
        ..RobConfig::default()
    };
    let mut card = FelixCard::new(FelixConfig {
        elinks: 8,
        ..FelixConfig::default()
    })
    .unwrap();
    let mut blocks = Vec::new();
    for _ in 0..l1as {
        card.l1_accept(&mut blocks);
    }
    card.flush(&mut blocks);
    let mut decoder = BlockDecoder::new(&rob.elinks);
    let mut aggregator = Aggregator::<PowerOfTwoIndex>::new(rob, Allocation::Pool).unwrap();
    decoder.decode_blocks(&blocks, |e, c, t| aggregator.add_chunk(e, c, t, &mut out));
    aggregator.flush(&mut out);
}

#[test]
fn requests_get_found_not_yet_gone_and_invalid() {
    let mut store = FragmentStore::new(100, 1000);
    build(300, |f| store.insert(Arc::new(f)));
    let status = |l1| store.lookup(l1).0;
    assert_eq!(status(250), RobRequestStatus::Found);
    let (_, f) = store.lookup(299);
    assert_eq!(
        RobFragment::parse(f.unwrap().bytes()).unwrap().rod.l1_id,
        299
    );
    assert_eq!(status(100), RobRequestStatus::Gone);
    assert_eq!(status(400), RobRequestStatus::NotYet);
    assert_eq!(status(5000), RobRequestStatus::Invalid);
}

/// A ROB that lags several ECRs behind the L1 accepts the HLT asks for answers "not yet", not
/// "invalid" (the SW ROD run's clean test saw events cut short that way on a loaded host).
#[test]
fn a_request_some_ecrs_ahead_of_a_lagging_rob_is_not_yet() {
    let mut store = FragmentStore::new(100, PLAUSIBLE_AHEAD);
    build(300, |f| store.insert(Arc::new(f)));
    let ecr = |n: u32, l1: u32| (n << 24) | l1;
    assert_eq!(store.lookup(ecr(3, 0x299)).0, RobRequestStatus::NotYet);
    assert_eq!(store.lookup(ecr(64, 0)).0, RobRequestStatus::NotYet);
    assert_eq!(store.lookup(ecr(65, 0)).0, RobRequestStatus::Invalid);
}

#[test]
fn chain_serves_records_samples_and_counts_a_slow_consumer() {
    let mut chain = ConsumerChain::new();
    let to_server = chain.add("requests", 1, 1024);
    let to_recorder = chain.add("recording", 1, 1024);
    let samples = chain.add("sampler", 10, 1024);
    let stalled = chain.add("stalled", 1, 5);
    build(200, |f| {
        assert!(f.complete);
        chain.deliver(f)
    });
    let counts: Vec<_> = chain.counts().collect();
    assert_eq!(counts[0].1.delivered, 200);
    assert_eq!(counts[2].1.delivered, 20);
    assert_eq!((counts[3].1.delivered, counts[3].1.dropped_slow), (5, 195));
    drop(chain);
    assert_eq!(samples.iter().count(), 20);
    assert_eq!(stalled.iter().count(), 5);

    let (req_tx, req_rx) = unbounded();
    // The server takes fragments and requests in any order: a request may come before most
    // fragments are stored, so none may look implausibly far ahead (`Invalid`).
    let server = std::thread::spawn(move || {
        serve_requests(
            to_server,
            req_rx,
            RequestServer::new(FragmentStore::new(1000, 1000), Duration::ZERO),
        )
    });
    let (reply_tx, reply_rx) = unbounded();
    for l1_id in [0, 150, 199] {
        req_tx
            .send(RobRequest {
                l1_id,
                reply: reply_tx.clone(),
            })
            .unwrap();
        // The server may not have stored the fragment yet: ask until it has.
        loop {
            let reply = reply_rx.recv().unwrap();
            if reply.status == RobRequestStatus::Found {
                let fragment = reply.fragment.unwrap();
                assert_eq!(
                    RobFragment::parse(fragment.bytes()).unwrap().rod.l1_id,
                    l1_id
                );
                break;
            }
            assert_eq!(reply.status, RobRequestStatus::NotYet);
            req_tx
                .send(RobRequest {
                    l1_id,
                    reply: reply_tx.clone(),
                })
                .unwrap();
        }
    }
    drop(req_tx);
    assert!(server.join().unwrap().found == 3);

    let header = RawFileHeader {
        frame_type: FragmentType::UNKNOWN,
        frame_size: RobConfig::default().buffer_size() as u32,
        source_id: SourceId::readout(0),
        run_number: 1,
        first_timestamp: 0,
        created_unix_ns: 0,
    };
    let writer = RawFileWriter::new(Vec::new(), &header).unwrap();
    let (written, bytes) = record(to_recorder, writer).unwrap();
    assert_eq!(written, 200);
    let mut reader = RawFileReader::new(&bytes[..]).unwrap();
    let mut frame = Vec::new();
    let mut l1_ids = Vec::new();
    while reader.next_frame(&mut frame).unwrap() {
        l1_ids.push(RobFragment::parse(&frame).unwrap().rod.l1_id);
    }
    assert_eq!(l1_ids, (0..200).collect::<Vec<u32>>());
}

#[test]
fn the_hlt_builds_every_event_names_the_robs_it_could_not_get_and_ends_lumi_blocks() {
    use swdaq_format::eformat::status;
    use swdaq_format::eformat_event::FullEvent;
    use swdaq_swrod::event::{EventEncoder, stream_tag};
    use swdaq_swrod::hlt::{HltConfig, HltOutput, MissingRob, RobPort, assemble_events};
    use swdaq_swrod::trigger::L1Accept;
    let (a_tx, a_rx) = unbounded();
    let (b_tx, b_rx) = unbounded();
    build(200, |f| {
        let f = Arc::new(f);
        a_tx.send(f.clone()).unwrap();
        // ROB B never gets L1 ID 50, and its stream stays open: it is not yet built as far
        // as B's server knows, until the HLT gives up.
        if f.l1_id != 50 {
            b_tx.send(f).unwrap();
        }
    });
    drop(a_tx);
    let mut ports = Vec::new();
    let mut servers = Vec::new();
    for (source_id, fragments) in [(0xA, a_rx), (0xB, b_rx)] {
        let (req_tx, req_rx) = unbounded();
        ports.push(RobPort {
            source_id,
            requests: req_tx,
        });
        servers.push(std::thread::spawn(move || {
            serve_requests(
                fragments,
                req_rx,
                RequestServer::new(FragmentStore::new(1000, 100), Duration::from_millis(10)),
            )
        }));
    }
    let (l1_tx, l1_rx) = unbounded();
    for (i, l1_id) in (0..200).chain([5000]).enumerate() {
        let l1a = L1Accept {
            l1_id,
            global_id: i as u64 + 1,
            lumi_block: 1 + i as u32 / 64,
            ..L1Accept::default()
        };
        l1_tx.send(l1a).unwrap();
    }
    drop(l1_tx);
    let config = HltConfig {
        max_in_flight: 64,
        retry_after: Duration::from_micros(100),
        // Long enough that only L1 ID 50, which ROB B never builds, is given up on, however
        // loaded the machine.
        give_up_after: Duration::from_secs(1),
    };
    let encoder = EventEncoder::new(9);
    let mut events = Vec::new();
    let mut ended = Vec::new();
    let counts = assemble_events(
        l1_rx,
        &ports,
        config,
        |o| match o {
            HltOutput::Event(e) => {
                for r in &e.robs {
                    assert_eq!(r.l1_id, e.l1a.l1_id);
                }
                // Every event of a block comes before the block's end.
                assert!(!ended.contains(&e.l1a.lumi_block));
                events.push((e.l1a, e.robs.len(), e.missing.clone(), encoder.encode(&e)));
            }
            HltOutput::LumiBlockEnded(lb) => ended.push(lb),
        },
        |_| {},
    );
    drop((ports, b_tx));
    for s in servers {
        s.join().unwrap();
    }
    assert_eq!(counts.events, 201);
    assert_eq!((counts.complete_events, counts.incomplete_events), (199, 2));
    assert_eq!(counts.timed_out_robs, 1);
    assert_eq!(counts.invalid, 2);
    assert_eq!(ended, vec![1, 2, 3, 4]);
    events.sort_by_key(|e| e.0.global_id);
    let ids: Vec<u32> = events.iter().map(|e| e.0.l1_id).collect();
    assert_eq!(ids, (0..200).chain([5000]).collect::<Vec<_>>());
    assert_eq!(events[50].1, 1);
    assert_eq!(events[50].2, vec![(0xB, MissingRob::TimedOut)]);
    assert_eq!(
        events[200].2,
        vec![(0xA, MissingRob::Invalid), (0xB, MissingRob::Invalid)]
    );
    assert!(
        events
            .iter()
            .filter(|e| e.0.l1_id != 50 && e.0.l1_id != 5000)
            .all(|e| e.1 == 2 && e.2.is_empty())
    );
    // The full events: the L1 accept's fields, the stream tag, every ROB in source order, a
    // missing one as a stand-in that says why.
    for (l1a, _, missing, bytes) in &events {
        let e = FullEvent::parse(bytes).unwrap();
        assert_eq!(e.header.global_id, l1a.global_id);
        assert_eq!(
            (e.header.l1_id, e.header.lumi_block, e.header.run_number),
            (l1a.l1_id, l1a.lumi_block, 9)
        );
        assert_eq!(e.stream_tags().unwrap(), vec![stream_tag()]);
        assert_eq!(e.hlt_info(), vec![1]);
        let robs: Vec<_> = e.robs().map(Result::unwrap).collect();
        // Both ROBs, in source-id order (the built ones carry their own, the stand-ins
        // their port's).
        assert_eq!(robs.len(), 2);
        assert!(robs.windows(2).all(|w| w[0].source_id <= w[1].source_id));
        let named: Vec<u32> = missing.iter().map(|m| m.0).collect();
        assert_eq!(e.missing_robs(), named);
        for r in robs.iter().filter(|r| named.contains(&r.source_id)) {
            assert_eq!(r.rod.l1_id, l1a.l1_id);
            assert!(r.data.is_empty());
            let first = r.status().next().unwrap();
            let why = if l1a.l1_id == 5000 {
                status::FRAGMENT_LOST
            } else {
                status::COLLECTION_TIMEOUT
            };
            assert_eq!(first, status::DUMMY_FRAGMENT | why);
        }
    }
}

#[test]
fn a_fragment_completed_late_is_not_yet_until_it_comes_not_gone() {
    let mut store = FragmentStore::new(100, 1000);
    let mut held = None;
    build(50, |f| {
        // Fragment 10 completes after the newer ones (as a timed-out one does).
        if f.l1_id == 10 {
            held = Some(f);
        } else {
            store.insert(Arc::new(f));
        }
    });
    assert_eq!(store.lookup(10).0, RobRequestStatus::NotYet);
    store.insert(Arc::new(held.unwrap()));
    assert_eq!(store.lookup(10).0, RobRequestStatus::Found);
}

/// Answers go to a plain list here (who asked, and the reply), as any transport would take them.
type Answers = Vec<(u32, u32, RobRequestStatus)>;

fn answer_into(answers: &mut Answers) -> impl FnMut(u32, swdaq_swrod::consumers::RobReply) + '_ {
    |who, reply| answers.push((who, reply.l1_id, reply.status))
}

#[test]
fn a_request_is_held_until_its_fragment_is_built_or_its_hold_runs_out() {
    use std::time::Instant;
    let mut fragments = Vec::new();
    build(20, |f| fragments.push(Arc::new(f)));
    let hold = Duration::from_millis(100);
    let mut server = RequestServer::new(FragmentStore::new(100, 1000), hold);
    let mut answers = Answers::new();
    let t0 = Instant::now();
    // Requester 1 asks for 3 before anything is built, 2 asks for 19: both held.
    server.request(3, 1, t0, &mut answer_into(&mut answers));
    server.request(19, 2, t0, &mut answer_into(&mut answers));
    assert!(answers.is_empty());
    assert_eq!(server.held(), 2);
    assert_eq!(server.next_deadline(), Some(t0 + hold));
    for f in &fragments[..10] {
        server.fragment(f.clone(), &mut answer_into(&mut answers));
    }
    // 3 is answered the moment it is built; 19 still waits.
    assert_eq!(answers, vec![(1, 3, RobRequestStatus::Found)]);
    server.expire(t0 + hold / 2, &mut answer_into(&mut answers));
    assert_eq!(answers.len(), 1);
    // Its hold over, 19 is "not yet": asked again, it is held again.
    server.expire(t0 + hold, &mut answer_into(&mut answers));
    assert_eq!(answers[1], (2, 19, RobRequestStatus::NotYet));
    server.request(19, 2, t0 + hold, &mut answer_into(&mut answers));
    server.request(25, 3, t0 + hold, &mut answer_into(&mut answers));
    // Kept fragments are answered at once, held or not.
    server.request(5, 4, t0 + hold, &mut answer_into(&mut answers));
    assert_eq!(answers[2], (4, 5, RobRequestStatus::Found));
    for f in &fragments[10..] {
        server.fragment(f.clone(), &mut answer_into(&mut answers));
    }
    assert_eq!(answers[3], (2, 19, RobRequestStatus::Found));
    // No more fragments: 25 will never be built, so it is gone now, and so is any later ask.
    server.end_of_fragments(&mut answer_into(&mut answers));
    assert_eq!(answers[4], (3, 25, RobRequestStatus::Gone));
    server.request(30, 5, t0 + hold, &mut answer_into(&mut answers));
    assert_eq!(answers[5], (5, 30, RobRequestStatus::Gone));
    assert_eq!(server.held(), 0);
    let counts = server.counts();
    assert_eq!(
        (counts.found, counts.held, counts.not_yet, counts.gone),
        (3, 2, 1, 2)
    );
}

/// The HLT asking ahead of a ROB that builds its fragments slowly hears of each one when it is
/// built: no "not yet", every event complete.
#[test]
fn an_hlt_ahead_of_its_rob_is_told_when_fragments_are_complete() {
    use swdaq_swrod::hlt::{HltConfig, HltOutput, RobPort, assemble_events};
    use swdaq_swrod::trigger::L1Accept;
    let mut fragments = Vec::new();
    build(300, |f| fragments.push(Arc::new(f)));
    let (f_tx, f_rx) = crossbeam_channel::bounded(1);
    let (req_tx, req_rx) = unbounded();
    let server = std::thread::spawn(move || {
        serve_requests(
            f_rx,
            req_rx,
            RequestServer::new(FragmentStore::new(1000, 1000), Duration::from_secs(5)),
        )
    });
    let (l1_tx, l1_rx) = unbounded();
    for i in 0..300u32 {
        l1_tx
            .send(L1Accept {
                l1_id: i,
                global_id: u64::from(i) + 1,
                lumi_block: 1,
                ..L1Accept::default()
            })
            .unwrap();
    }
    drop(l1_tx);
    let feeder = std::thread::spawn(move || {
        for f in fragments {
            std::thread::sleep(Duration::from_micros(200));
            f_tx.send(f).unwrap();
        }
    });
    let ports = [RobPort {
        source_id: 0xA,
        requests: req_tx,
    }];
    let config = HltConfig {
        max_in_flight: 64,
        retry_after: Duration::from_micros(100),
        give_up_after: Duration::from_secs(10),
    };
    let mut complete = 0;
    let counts = assemble_events(
        l1_rx,
        &ports,
        config,
        |o| {
            if let HltOutput::Event(e) = o {
                complete += u32::from(e.is_complete());
            }
        },
        |_| {},
    );
    feeder.join().unwrap();
    drop(ports);
    let served = server.join().unwrap();
    assert_eq!((complete, counts.events, counts.not_yet), (300, 300, 0));
    assert_eq!(served.found, 300);
    assert!(served.held > 200, "{served:?}");
}

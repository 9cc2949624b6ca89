//! A FELIX server and its subscribers over TCP on 127.0.0.1: every subscriber gets exactly
//! the blocks of its e-links, in the order the card made them; a peer speaking another
//! protocol (or garbage) is refused with why and counted, and the others are served; a
//! server sending garbage costs its subscriber the connection, counted, never a panic.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use swdaq_format::felix::{BLOCK_SIZE, BlockHeader, TTC_TO_HOST_ELINK};
use swdaq_sim::felix::{BlockSink, FelixCard, FelixConfig, FelixMode};
use swdaq_swrod::net::server::{Published, ServerConfig, publish};
use swdaq_swrod::net::stream::{MessageReader, write_message};
use swdaq_swrod::net::subscriber::{Intake, IntakeError, Subscriber};
use swdaq_swrod::net::wire::{HEADER_SIZE, Kind, MAGIC, Subscribed, VERSION};

const ELINKS: u16 = 8;
const L1AS: u64 = 500;

fn card() -> FelixConfig {
    FelixConfig {
        elinks: ELINKS,
        chunk_min: 8,
        chunk_max: 200,
        ttc_to_host: true,
        seed: 11,
        ..FelixConfig::default()
    }
}

/// A FULL-mode card: 4 KiB blocks with 32-bit trailers, chunks spanning blocks.
fn full_mode_card() -> FelixConfig {
    FelixConfig {
        mode: FelixMode::Full,
        block_kib: Some(4),
        chunk_min: 1000,
        chunk_max: 6000,
        ..card()
    }
}

/// The card's blocks by e-link, as the emulator makes them (the server's card, replayed).
fn blocks_by_elink(config: FelixConfig) -> HashMap<u16, Vec<u8>> {
    struct ByElink(HashMap<u16, Vec<u8>>);
    impl BlockSink for ByElink {
        fn block(&mut self, elink: u16, block: &[u8]) {
            self.0.entry(elink).or_default().extend_from_slice(block);
        }
    }
    let mut card = FelixCard::new(config).unwrap();
    let mut sink = ByElink(HashMap::new());
    for _ in 0..L1AS {
        card.l1_accept(&mut sink);
    }
    card.flush(&mut sink);
    sink.0
}

fn server(felix: FelixConfig) -> (SocketAddr, std::thread::JoinHandle<Published>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig {
        card: 3,
        felix,
        l1as: L1AS,
        rate_hz: 0.0,
        wait_for_subscribers: Duration::from_secs(20),
    };
    let handle = std::thread::spawn(move || publish(listener, &config, |_| Ok(())).unwrap());
    (addr, handle)
}

fn subscribe(addr: SocketAddr, elinks: &[u16]) -> Result<Subscriber, IntakeError> {
    Subscriber::connect(
        addr,
        elinks,
        Duration::from_secs(10),
        Duration::from_millis(300),
        || false,
    )
}

/// Everything a subscriber receives until the server's `End`, and that `End`'s block count.
fn receive_all(mut subscriber: Subscriber) -> (Vec<u8>, Subscriber) {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(std::time::Instant::now() < deadline, "no End in 30 s");
        match subscriber.receive().unwrap() {
            Intake::Blocks(b) => got.extend_from_slice(b),
            Intake::Idle => {}
            Intake::End(end) => {
                assert_eq!(
                    end.blocks,
                    (got.len() / subscriber.card().block_size) as u64
                );
                assert_eq!(end.l1as, L1AS);
                return (got, subscriber);
            }
        }
    }
}

/// A raw connection's first answer: the kind and its payload.
fn answer_to(addr: SocketAddr, bytes: &[u8]) -> (Kind, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(bytes).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = MessageReader::default();
    let header = reader.read(&mut stream).unwrap().expect("an answer");
    (
        header.kind,
        String::from_utf8_lossy(reader.payload()).into_owned(),
    )
}

#[test]
fn subscribers_get_the_blocks_of_their_elinks_and_strangers_are_refused() {
    let (addr, server) = server(card());
    // Before the real subscribers: a peer of another protocol version, one sending garbage,
    // one asking for an e-link the card does not have.
    let mut other_version = [0u8; HEADER_SIZE];
    other_version[0..4].copy_from_slice(&MAGIC);
    other_version[4..6].copy_from_slice(&(VERSION + 1).to_le_bytes());
    other_version[6..8].copy_from_slice(&(Kind::Subscribe as u16).to_le_bytes());
    let (kind, why) = answer_to(addr, &other_version);
    assert_eq!(kind, Kind::Refused);
    assert!(why.contains("version"), "{why}");
    let (kind, why) = answer_to(addr, &[0xEE; 64]);
    assert_eq!((kind, why.is_empty()), (Kind::Refused, false));
    match subscribe(addr, &[0, ELINKS]) {
        Err(IntakeError::Refused { why, .. }) => assert!(why.contains("e-link 8"), "{why}"),
        other => panic!("a subscription to e-link {ELINKS}: {:?}", other.err()),
    }

    let low: Vec<u16> = (0..ELINKS / 2).chain([TTC_TO_HOST_ELINK]).collect();
    let high: Vec<u16> = (ELINKS / 2..ELINKS).collect();
    let low = subscribe(addr, &low).unwrap();
    assert_eq!(
        low.card(),
        Subscribed {
            card: 3,
            elinks: ELINKS,
            ttc_to_host: true,
            block_size: BLOCK_SIZE,
        }
    );
    let high = std::thread::spawn(move || receive_all(subscribe(addr, &high).unwrap()));
    let (low_got, low) = receive_all(low);
    let (high_got, high) = high.join().unwrap();
    let published = server.join().unwrap();

    // Each subscriber's blocks, per e-link in order, are the card's, and nothing else.
    let want = blocks_by_elink(card());
    for (got, elinks) in [
        (
            &low_got,
            (0..ELINKS / 2)
                .chain([TTC_TO_HOST_ELINK])
                .collect::<Vec<_>>(),
        ),
        (&high_got, (ELINKS / 2..ELINKS).collect()),
    ] {
        let mut by_elink: HashMap<u16, Vec<u8>> = HashMap::new();
        for block in got.chunks(BLOCK_SIZE) {
            let elink = BlockHeader::decode(block).unwrap().elink;
            by_elink.entry(elink).or_default().extend_from_slice(block);
        }
        assert_eq!(by_elink.len(), elinks.len());
        for e in elinks {
            assert!(by_elink[&e] == want[&e], "e-link {e}: blocks differ");
        }
    }
    for s in [&low, &high] {
        let c = s.counts;
        assert_eq!(
            (
                c.out_of_sequence,
                c.malformed,
                c.connection_losses,
                c.blocks_missing
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(c.subscriptions, 1);
    }
    let total: usize = want.values().map(Vec::len).sum();
    assert_eq!(published.blocks, (total / BLOCK_SIZE) as u64);
    assert_eq!(published.blocks_sent, published.blocks);
    assert_eq!((published.subscriptions, published.refused), (2, 3));
    assert_eq!(
        (published.blocks_unsubscribed, published.disconnects),
        (0, 0)
    );
}

/// A FULL-mode card's blocks (4 KiB) travel whole: the subscriber learns the block size from
/// the subscription and gets every e-link's blocks as the card made them.
#[test]
fn a_full_mode_card_s_blocks_reach_their_subscriber_whole() {
    let (addr, server) = server(full_mode_card());
    let elinks: Vec<u16> = (0..ELINKS).chain([TTC_TO_HOST_ELINK]).collect();
    let subscriber = subscribe(addr, &elinks).unwrap();
    assert_eq!(subscriber.card().block_size, 4096);
    let (got, subscriber) = receive_all(subscriber);
    let published = server.join().unwrap();
    let layout = full_mode_card().layout().unwrap();
    let mut by_elink: HashMap<u16, Vec<u8>> = HashMap::new();
    for block in got.chunks(4096) {
        let elink = BlockHeader::decode_as(layout, block).unwrap().elink;
        by_elink.entry(elink).or_default().extend_from_slice(block);
    }
    assert!(
        by_elink == blocks_by_elink(full_mode_card()),
        "blocks differ"
    );
    let c = subscriber.counts;
    assert_eq!(
        (c.malformed, c.connection_losses, c.blocks_missing),
        (0, 0, 0)
    );
    assert_eq!(published.blocks, (got.len() / 4096) as u64);
}

#[test]
fn a_server_sending_garbage_costs_the_connection_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = MessageReader::default();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let header = reader.read(&mut stream).unwrap().unwrap();
        assert_eq!(header.kind, Kind::Subscribe);
        let card = Subscribed {
            card: 0,
            elinks: ELINKS,
            ttc_to_host: true,
            block_size: BLOCK_SIZE,
        };
        let mut sequence = 0;
        write_message(&mut stream, Kind::Subscribed, &mut sequence, &card.encode()).unwrap();
        stream.write_all(&[0x5A; 100]).unwrap();
        // Later connections (the subscriber trying again) find nobody listening.
    });
    let mut subscriber = subscribe(addr, &[0, 1]).unwrap();
    fake.join().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let end = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the subscriber never gave up"
        );
        match subscriber.receive().unwrap() {
            Intake::Blocks(_) => panic!("garbage read as blocks"),
            Intake::Idle => {}
            Intake::End(end) => break end,
        }
    };
    // Given up after `reconnect_for`: an end with nothing known sent.
    assert_eq!((end.blocks, end.l1as), (0, 0));
    let c = subscriber.counts;
    assert_eq!((c.malformed, c.blocks, c.subscriptions), (1, 0, 1));
}

/// A server that sends its answer a byte at a time, slower than the wait allows, holds the
/// subscription no longer than the caller's wait: the time-out is for the whole answer, not
/// per byte.
#[test]
fn a_server_answering_a_byte_at_a_time_is_given_the_wait_not_its_own() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let slow = std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let card = Subscribed {
            card: 0,
            elinks: ELINKS,
            ttc_to_host: true,
            block_size: BLOCK_SIZE,
        };
        let mut answer = Vec::new();
        write_message(&mut answer, Kind::Subscribed, &mut 0, &card.encode()).unwrap();
        let mut open = Vec::new();
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((stream, _)) = listener.accept() {
                open.push((stream, 0));
            }
            for (stream, sent) in &mut open {
                if *sent < answer.len() - 1 && stream.write_all(&answer[*sent..*sent + 1]).is_ok() {
                    *sent += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let started = std::time::Instant::now();
    let wait = Duration::from_secs(2);
    let result = Subscriber::connect(addr, &[0, 1], wait, Duration::from_millis(300), || false);
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    slow.join().unwrap();
    assert!(
        matches!(result, Err(IntakeError::Unreachable { .. })),
        "{:?}",
        result.err()
    );
    assert!(took < wait + Duration::from_secs(1), "took {took:?}");
}

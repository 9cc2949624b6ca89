//! A FELIX server publishing one emulated card to its subscribers: what `swdaq gen --format
//! felix --tcp` runs, standing for a FELIX host. It waits until every e-link of the card
//! (and its TTC-to-host e-link) has a subscriber, then makes the card's L1 accepts at the
//! L1A rate (or as fast as the subscribers take them), sends each subscriber the blocks of
//! its e-links after every batch of L1 accepts (about 100 us of them), and ends every
//! connection with `End`, after `before_end` has seen the card's injected faults (the
//! generator writes its truth there, so a subscriber that has the `End` finds the truth).
//!
//! Sending waits for a slow subscriber (TCP's flow control: the card falls behind the L1A
//! clock, counted as lag, as a FELIX card's busy would hold the trigger back); a subscriber
//! that takes nothing for [`WRITE_TIMEOUT`], or whose connection fails, is dropped and its
//! e-links' blocks are counted unsubscribed from then on. Subscribers may come (again) at any
//! time; one asking for an e-link the card does not have is refused with why.

use super::stream::{BlocksMessage, MessageReader, StreamError, write_message};
use super::wire::{Kind, Subscribed, parse_elinks};
use serde::Serialize;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use swdaq_format::felix::{BlockLayout, MAX_ELINK, TTC_TO_HOST_ELINK};
use swdaq_readout::udp::Pacer;
use swdaq_sim::felix::{BlockSink, FelixCard, FelixConfig, FelixConfigError, FelixFault};

/// A subscriber that takes no data for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new connection has to say what it subscribes to.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// L1 accepts are made in batches of about this much time.
const BATCH_SECONDS: f64 = 100e-6;
/// Batch of L1 accepts when not paced.
const UNPACED_BATCH: u64 = 64;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The card's number (reported to subscribers; its e-links are 0..elinks).
    pub card: u16,
    /// The card's emulator; the TTC-to-host e-link is always on.
    pub felix: FelixConfig,
    pub l1as: u64,
    /// L1 accepts per second (0: as fast as the subscribers take them).
    pub rate_hz: f64,
    /// How long the card waits for every e-link to have a subscriber.
    pub wait_for_subscribers: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] FelixConfigError),
    #[error("card {card}: no subscriber after {waited:?} for {missing}")]
    NoSubscribers {
        card: u16,
        waited: Duration,
        missing: String,
    },
    #[error("card {card}: {source}")]
    Io { card: u16, source: io::Error },
}

/// What the server did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Published {
    pub card: u16,
    pub l1as: u64,
    /// Blocks the card made.
    pub blocks: u64,
    /// Blocks sent, each copy counted (an e-link with two subscribers sends each block twice).
    pub blocks_sent: u64,
    /// Blocks of e-links that had no subscriber when they were made.
    pub blocks_unsubscribed: u64,
    pub messages: u64,
    pub subscriptions: u64,
    /// Connections refused (unknown e-links, garbage, another protocol version).
    pub refused: u64,
    /// Subscribers dropped before the end (their connection failed or stalled).
    pub disconnects: u64,
    /// From the card's first L1 accept to its `End`s.
    pub seconds: f64,
    /// Largest delay of an L1 accept batch behind the L1A clock.
    pub max_lag_ms: f64,
    #[serde(skip)]
    pub faults: Vec<FelixFault>,
}

struct Peer {
    stream: TcpStream,
    sequence: u32,
    message: BlocksMessage,
    sent: u64,
    /// A send failed: the peer is dropped after the batch.
    failed: bool,
    dropped: bool,
}

impl Peer {
    fn send(&mut self, published: &mut Published) {
        if self.failed {
            return;
        }
        match self.message.send(&mut self.stream, &mut self.sequence) {
            Ok(0) => {}
            Ok(blocks) => {
                self.sent += blocks as u64;
                published.blocks_sent += blocks as u64;
                published.messages += 1;
            }
            Err(_) => self.failed = true,
        }
    }
}

/// The card's subscribers and which e-links each takes.
struct Subscribers {
    card: u16,
    felix: Subscribed,
    peers: Vec<Peer>,
    /// Peer indices by e-link number.
    by_elink: Vec<Vec<usize>>,
}

impl Subscribers {
    fn new(card: u16, felix: &FelixConfig, layout: BlockLayout) -> Self {
        Self {
            card,
            felix: Subscribed {
                card,
                elinks: felix.elinks,
                ttc_to_host: true,
                block_size: layout.block_size(),
            },
            peers: Vec::new(),
            by_elink: vec![Vec::new(); usize::from(MAX_ELINK) + 1],
        }
    }

    /// The card's e-links nobody subscribed to, in words (empty when all are taken).
    fn missing(&self) -> String {
        let mut missing: Vec<String> = Vec::new();
        let mut run: Option<(u16, u16)> = None;
        let close = |run: &mut Option<(u16, u16)>, missing: &mut Vec<String>| {
            if let Some((a, b)) = run.take() {
                missing.push(if a == b {
                    format!("e-link {a}")
                } else {
                    format!("e-links {a}..={b}")
                });
            }
        };
        for e in 0..self.felix.elinks {
            if self.by_elink[usize::from(e)].is_empty() {
                run = Some(run.map_or((e, e), |(a, _)| (a, e)));
            } else {
                close(&mut run, &mut missing);
            }
        }
        close(&mut run, &mut missing);
        if self.by_elink[usize::from(TTC_TO_HOST_ELINK)].is_empty() {
            missing.push("the TTC-to-host e-link".into());
        }
        missing.join(", ")
    }

    /// Takes every connection waiting on `listener` (non-blocking) and its subscription.
    fn accept(&mut self, listener: &TcpListener, published: &mut Published) -> io::Result<()> {
        loop {
            let (stream, _) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A connection that failed before it was taken is the peer's problem.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(e),
            };
            match self.subscribe(stream) {
                Ok(()) => published.subscriptions += 1,
                Err(_) => published.refused += 1,
            }
        }
    }

    fn subscribe(&mut self, mut stream: TcpStream) -> Result<(), String> {
        let refuse = |stream: &mut TcpStream, why: String| {
            let _ = write_message(stream, Kind::Refused, &mut 0, why.as_bytes());
            Err(why)
        };
        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(SUBSCRIBE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut reader = MessageReader::default();
        let elinks = match reader.read(&mut stream) {
            Ok(Some(h)) if h.kind == Kind::Subscribe => match parse_elinks(reader.payload()) {
                Ok(elinks) => elinks,
                Err(e) => return refuse(&mut stream, e.to_string()),
            },
            Ok(Some(h)) => {
                return refuse(
                    &mut stream,
                    format!("expected a Subscribe message, got {:?}", h.kind),
                );
            }
            Ok(None) => return refuse(&mut stream, "no subscription in time".into()),
            Err(StreamError::Malformed(e)) => return refuse(&mut stream, e.to_string()),
            Err(e) => return Err(e.to_string()),
        };
        if let Some(&e) = elinks
            .iter()
            .find(|&&e| e >= self.felix.elinks && e != TTC_TO_HOST_ELINK)
        {
            return refuse(
                &mut stream,
                format!(
                    "card {} has e-links 0..{} and the TTC-to-host e-link {TTC_TO_HOST_ELINK}, not e-link {e}",
                    self.card, self.felix.elinks
                ),
            );
        }
        let mut sequence = 0;
        write_message(
            &mut stream,
            Kind::Subscribed,
            &mut sequence,
            &self.felix.encode(),
        )
        .map_err(|e| e.to_string())?;
        let index = self.peers.len();
        let mut elinks = elinks;
        elinks.sort_unstable();
        elinks.dedup();
        for e in elinks {
            self.by_elink[usize::from(e)].push(index);
        }
        self.peers.push(Peer {
            stream,
            sequence,
            message: BlocksMessage::new(self.felix.block_size),
            sent: 0,
            failed: false,
            dropped: false,
        });
        Ok(())
    }

    /// Sends what each subscriber has pending; drops the ones that failed.
    fn send_all(&mut self, published: &mut Published) {
        for peer in &mut self.peers {
            peer.send(published);
        }
        for (index, peer) in self.peers.iter_mut().enumerate() {
            if peer.failed && !peer.dropped {
                peer.dropped = true;
                peer.message.clear();
                published.disconnects += 1;
                for subscribed in &mut self.by_elink {
                    subscribed.retain(|&p| p != index);
                }
            }
        }
    }
}

/// Routes a card's blocks to the subscribers of their e-links.
struct Router<'a> {
    subscribers: &'a mut Subscribers,
    published: &'a mut Published,
}

impl BlockSink for Router<'_> {
    fn block(&mut self, elink: u16, block: &[u8]) {
        self.published.blocks += 1;
        let Router {
            subscribers,
            published,
        } = self;
        let takers = &subscribers.by_elink[usize::from(elink & MAX_ELINK)];
        if takers.is_empty() {
            published.blocks_unsubscribed += 1;
            return;
        }
        for &p in takers {
            let peer = &mut subscribers.peers[p];
            peer.message.push(block);
            if peer.message.is_full() {
                peer.send(published);
            }
        }
    }
}

/// Publishes the card of `config` to the subscribers that connect to `listener`; `before_end`
/// sees the injected faults before any subscriber is sent its `End`.
pub fn publish(
    listener: TcpListener,
    config: &ServerConfig,
    before_end: impl FnOnce(&[FelixFault]) -> io::Result<()>,
) -> Result<Published, ServerError> {
    let card_no = config.card;
    let io_error = |source| ServerError::Io {
        card: card_no,
        source,
    };
    let mut card = FelixCard::new(FelixConfig {
        ttc_to_host: true,
        ..config.felix.clone()
    })?;
    listener.set_nonblocking(true).map_err(io_error)?;
    let mut published = Published {
        card: card_no,
        ..Published::default()
    };
    let mut subscribers = Subscribers::new(card_no, card.config(), card.layout());
    let waiting = Instant::now();
    loop {
        subscribers
            .accept(&listener, &mut published)
            .map_err(io_error)?;
        if subscribers.missing().is_empty() {
            break;
        }
        if waiting.elapsed() >= config.wait_for_subscribers {
            return Err(ServerError::NoSubscribers {
                card: card_no,
                waited: config.wait_for_subscribers,
                missing: subscribers.missing(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    let batch = if config.rate_hz > 0.0 {
        ((config.rate_hz * BATCH_SECONDS).round() as u64).max(1)
    } else {
        UNPACED_BATCH
    };
    let pacer = Pacer::start_now();
    let started = Instant::now();
    let mut made = 0u64;
    while made < config.l1as {
        subscribers
            .accept(&listener, &mut published)
            .map_err(io_error)?;
        if config.rate_hz > 0.0 {
            let due = Duration::from_secs_f64(made as f64 / config.rate_hz);
            let late = started.elapsed().saturating_sub(due);
            published.max_lag_ms = published.max_lag_ms.max(late.as_secs_f64() * 1e3);
            pacer.wait_until(due);
        }
        let mut router = Router {
            subscribers: &mut subscribers,
            published: &mut published,
        };
        for _ in 0..batch.min(config.l1as - made) {
            card.l1_accept(&mut router);
            made += 1;
        }
        subscribers.send_all(&mut published);
    }
    card.flush(&mut Router {
        subscribers: &mut subscribers,
        published: &mut published,
    });
    subscribers.send_all(&mut published);
    published.l1as = made;
    published.faults = card.faults().to_vec();
    before_end(&published.faults).map_err(io_error)?;
    for peer in subscribers
        .peers
        .iter_mut()
        .filter(|p| !p.dropped && !p.failed)
    {
        let end = super::wire::End {
            blocks: peer.sent,
            l1as: made,
        };
        if write_message(
            &mut peer.stream,
            Kind::End,
            &mut peer.sequence,
            &end.encode(),
        )
        .is_err()
        {
            published.disconnects += 1;
            continue;
        }
        // The kernel delivers what is sent before the close, even after this process exits
        // (a subscriber sends nothing after its subscription, so the close is orderly).
        let _ = peer.stream.shutdown(std::net::Shutdown::Write);
    }
    published.seconds = started.elapsed().as_secs_f64();
    Ok(published)
}

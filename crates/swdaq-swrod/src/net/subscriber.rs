//! A subscriber to a FELIX server's e-links: connects (trying again until the server is
//! there), subscribes, and hands back each `Blocks` message's blocks where they were read.
//! A connection that fails, or a message of another protocol, is counted and made again
//! (as felix-client re-establishes a lost connection); what the server sent meanwhile is
//! lost, and the block decoder's sequence check and aggregation count what that broke.

use super::stream::{MessageReader, StreamError, write_message};
use super::wire::{End, Kind, Subscribed, encode_elinks};
use serde::{Deserialize, Serialize};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a read waits before [`Subscriber::receive`] returns `Idle` (the caller can look at
/// its stop flag that often).
pub const POLL: Duration = Duration::from_millis(20);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The whole answer to a subscription, however it trickles in: a FELIX server answers in
/// milliseconds, and a lost connection's new subscription holds the intake (and a stop) up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// What a subscriber took in (one writer: its thread).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeCounts {
    pub messages: u64,
    pub blocks: u64,
    pub bytes: u64,
    /// Messages the server numbered that never arrived (gaps in its sequence numbers).
    pub out_of_sequence: u64,
    /// Messages not of this protocol, or not expected then: the connection is made again.
    pub malformed: u64,
    /// Subscriptions made: the first, and one after each lost connection.
    pub subscriptions: u64,
    /// Connections that ended before the server's `End`.
    pub connection_losses: u64,
    /// Blocks the server's `End` says it sent on the connection, beyond those received.
    pub blocks_missing: u64,
}

/// What [`Subscriber::receive`] found.
pub enum Intake<'a> {
    /// Whole blocks, in the order the card completed them.
    Blocks(&'a [u8]),
    /// Nothing within [`POLL`] (or the connection is being made again).
    Idle,
    /// The server ended its publication (every later call says so again).
    End(End),
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("FELIX server {addr}: no subscription within {waited:?} ({last})")]
    Unreachable {
        addr: SocketAddr,
        waited: Duration,
        last: String,
    },
    #[error("FELIX server {addr} refused the subscription: {why}")]
    Refused { addr: SocketAddr, why: String },
}

struct Connection {
    stream: TcpStream,
    next_sequence: u32,
    blocks: u64,
}

pub struct Subscriber {
    addr: SocketAddr,
    elinks: Vec<u16>,
    connection: Option<Connection>,
    reader: MessageReader,
    card: Subscribed,
    ended: Option<End>,
    /// A lost connection is made again for this long before the subscriber gives up.
    reconnect_for: Duration,
    lost_at: Option<Instant>,
    /// Why the publication ended without the server's `End`, once it did.
    given_up: Option<String>,
    pub counts: IntakeCounts,
}

impl Subscriber {
    /// Subscribes to `elinks` of the server at `addr`, trying for up to `wait` (or until
    /// `give_up` says so); later losses are made good for up to `reconnect_for`.
    pub fn connect(
        addr: SocketAddr,
        elinks: &[u16],
        wait: Duration,
        reconnect_for: Duration,
        give_up: impl Fn() -> bool,
    ) -> Result<Self, IntakeError> {
        let started = Instant::now();
        let mut counts = IntakeCounts::default();
        let (connection, card) = loop {
            let deadline = (started + wait).min(Instant::now() + ANSWER_TIMEOUT);
            match subscribe(addr, elinks, deadline) {
                Ok(Subscription::Made(c, card)) => break (c, card),
                Ok(Subscription::Refused(why)) => return Err(IntakeError::Refused { addr, why }),
                Err(last) => {
                    if started.elapsed() >= wait || give_up() {
                        return Err(IntakeError::Unreachable {
                            addr,
                            waited: started.elapsed(),
                            last,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        counts.subscriptions = 1;
        Ok(Self {
            addr,
            elinks: elinks.to_vec(),
            connection: Some(connection),
            reader: MessageReader::default(),
            card,
            ended: None,
            reconnect_for,
            lost_at: None,
            given_up: None,
            counts,
        })
    }

    /// The card the server publishes.
    pub fn card(&self) -> Subscribed {
        self.card
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Why the publication ended without the server's `End` (a connection lost for longer
    /// than `reconnect_for`), naming the server and what broke it; `None` while it goes on
    /// or when the server ended it.
    pub fn given_up(&self) -> Option<&str> {
        self.given_up.as_deref()
    }

    /// The next message's blocks, `Idle`, or the server's `End`. A connection lost for longer
    /// than `reconnect_for` is the end of this publication too (`End` with zeros, the loss
    /// counted).
    pub fn receive(&mut self) -> Result<Intake<'_>, IntakeError> {
        if let Some(end) = self.ended {
            return Ok(Intake::End(end));
        }
        let Some(connection) = self.connection.as_mut() else {
            return self.reconnect();
        };
        let header = match self.reader.read(&mut connection.stream) {
            Ok(None) => return Ok(Intake::Idle),
            Ok(Some(h)) => h,
            Err(StreamError::Malformed(_)) => {
                self.counts.malformed += 1;
                return Ok(self.lose());
            }
            Err(_) => {
                self.counts.connection_losses += 1;
                return Ok(self.lose());
            }
        };
        self.counts.out_of_sequence +=
            u64::from(header.sequence.wrapping_sub(connection.next_sequence));
        connection.next_sequence = header.sequence.wrapping_add(1);
        match header.kind {
            // Whole blocks of the card's size, or the stream is not the card's.
            Kind::Blocks if !header.len.is_multiple_of(self.card.block_size) => {
                self.counts.malformed += 1;
                Ok(self.lose())
            }
            Kind::Blocks => {
                let blocks = (header.len / self.card.block_size) as u64;
                connection.blocks += blocks;
                self.counts.messages += 1;
                self.counts.blocks += blocks;
                self.counts.bytes += header.len as u64;
                Ok(Intake::Blocks(self.reader.payload()))
            }
            Kind::End => match End::parse(self.reader.payload()) {
                Ok(end) => {
                    self.counts.messages += 1;
                    self.counts.blocks_missing += end.blocks.saturating_sub(connection.blocks);
                    self.ended = Some(end);
                    self.connection = None;
                    Ok(Intake::End(end))
                }
                Err(_) => {
                    self.counts.malformed += 1;
                    Ok(self.lose())
                }
            },
            Kind::Subscribe | Kind::Subscribed | Kind::Refused => {
                self.counts.malformed += 1;
                Ok(self.lose())
            }
        }
    }

    fn lose(&mut self) -> Intake<'static> {
        self.connection = None;
        self.reader = MessageReader::default();
        self.lost_at = Some(Instant::now());
        Intake::Idle
    }

    fn reconnect(&mut self) -> Result<Intake<'_>, IntakeError> {
        let lost = *self.lost_at.get_or_insert_with(Instant::now);
        let deadline = (lost + self.reconnect_for).min(Instant::now() + ANSWER_TIMEOUT);
        match subscribe(self.addr, &self.elinks, deadline) {
            Ok(Subscription::Made(c, _)) => {
                self.counts.subscriptions += 1;
                self.connection = Some(c);
                self.lost_at = None;
                Ok(Intake::Idle)
            }
            Ok(Subscription::Refused(why)) => Err(IntakeError::Refused {
                addr: self.addr,
                why,
            }),
            Err(last) if lost.elapsed() >= self.reconnect_for => {
                let c = self.counts;
                self.given_up = Some(format!(
                    "FELIX server {}: connection lost ({} malformed messages, {} connections broken) and not made again within {:?} ({last})",
                    self.addr, c.malformed, c.connection_losses, self.reconnect_for
                ));
                let end = End::default();
                self.ended = Some(end);
                Ok(Intake::End(end))
            }
            Err(_) => {
                std::thread::sleep(POLL);
                Ok(Intake::Idle)
            }
        }
    }
}

enum Subscription {
    Made(Connection, Subscribed),
    Refused(String),
}

/// The stream read against one deadline for a whole answer: each read waits only for what
/// is left of it, so a server sending a byte a second cannot stretch the wait per byte.
struct Deadline<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// One attempt: connect, send the subscription, read the answer, all by `deadline`. `Err`:
/// try again later.
fn subscribe(addr: SocketAddr, elinks: &[u16], deadline: Instant) -> Result<Subscription, String> {
    let connect_for = deadline
        .saturating_duration_since(Instant::now())
        .clamp(Duration::from_millis(1), CONNECT_TIMEOUT);
    let mut stream = TcpStream::connect_timeout(&addr, connect_for).map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    stream
        .set_write_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write_message(&mut stream, Kind::Subscribe, &mut 0, &encode_elinks(elinks))
        .map_err(|e| e.to_string())?;
    let mut reader = MessageReader::default();
    let mut answer_by = Deadline {
        stream: &stream,
        deadline,
    };
    let answer = loop {
        match reader.read(&mut answer_by) {
            Ok(Some(h)) => break h,
            // A time-out or an interrupted read: the deadline says which.
            Ok(None) if Instant::now() < deadline => continue,
            Ok(None) => return Err("no answer to the subscription in time".into()),
            Err(e) => return Err(e.to_string()),
        }
    };
    match answer.kind {
        Kind::Subscribed => {
            let card = Subscribed::parse(reader.payload()).map_err(|e| e.to_string())?;
            let next_sequence = answer.sequence.wrapping_add(1);
            stream
                .set_read_timeout(Some(POLL))
                .map_err(|e| e.to_string())?;
            Ok(Subscription::Made(
                Connection {
                    stream,
                    next_sequence,
                    blocks: 0,
                },
                card,
            ))
        }
        Kind::Refused => Ok(Subscription::Refused(
            String::from_utf8_lossy(reader.payload()).into_owned(),
        )),
        other => Err(format!("answered {other:?} to a subscription")),
    }
}

//! FED fragments from FEROL streams over TCP (`[evb.input] kind = "tcp"`), as CMS's readout
//! units take them: the readout unit listens and each FEROL connects (mommsen/evb's
//! `FerolConnectionManager` accepts the FEROLs' connections), one stream per FEROL carrying
//! the fragments of one or several FEDs, each cut into FEROL blocks
//! (`swdaq_format::ferol`). Every corruption a block header can show is counted for the FED
//! it concerns and costs that fragment only; a stream that closes, is cut mid-fragment or
//! stalls mid-fragment for longer than `stop_wait` is counted for each of its FEDs, and the
//! summary names it.
//!
//! One stream, several FEDs: every FED keeps its own link (its own [`FrameSource`], so the
//! producer, the checks and the counters stay per FED), and the links of one stream share
//! one [`FerolStream`] behind an `Arc<Mutex<_>>`. All of a readout unit's links are read by
//! its one thread, so the lock is never contended (an uncontended lock is an atomic
//! exchange, far below a fragment's copy); `Arc<Mutex<_>>` rather than `Rc<RefCell<_>>`
//! because the producer, with its sources, moves to that thread (`FrameSource: Send`).
//! Whichever FED's link asks for data and finds its queue empty reads the socket, and every
//! fragment read lands in its own FED's queue. A queue that holds `queued_cap` fragments
//! stops the reading (TCP then holds the FEROL back) until its link takes them: memory is
//! bounded, and a FED far ahead of the others waits as its FEROL would.
//!
//! Every wait is bounded: the listener and the connection are non-blocking, each call reads
//! at most a few chunks, and nothing here sleeps.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use swdaq_format::ferol::{FerolDeframer, FerolItem, FerolProblem};
use swdaq_readout::source::{FrameSource, Poll, StreamCounts};

/// Reads one call makes at most (each up to the deframer's chunk): enough to keep up with a
/// busy stream, few enough that the other streams of the unit are read soon.
const READS_PER_CALL: usize = 4;

/// One FED's queue of whole fragments, each in a buffer reused once taken (no allocation
/// per fragment once the queue has reached its depth).
#[derive(Default)]
struct FedQueue {
    ready: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

impl FedQueue {
    fn push(&mut self, bytes: &[u8]) {
        let mut buffer = self.spare.pop().unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(bytes);
        self.ready.push_back(buffer);
    }

    /// The oldest fragment into `slot` (left out when larger: its length says so and the
    /// link counts it oversized).
    fn pop(&mut self, slot: &mut [u8]) -> Option<usize> {
        let buffer = self.ready.pop_front()?;
        let len = buffer.len();
        if let Some(to) = slot.get_mut(..len) {
            to.copy_from_slice(&buffer);
        }
        self.spare.push(buffer);
        Some(len)
    }
}

/// One FEROL stream: its listening socket, the connection once a FEROL has made it, and
/// what it delivered per FED.
pub struct FerolStream {
    listener: TcpListener,
    address: SocketAddr,
    connection: Option<TcpStream>,
    deframer: FerolDeframer,
    /// The stream's FEDs, in the order of `queues` and `counts`.
    feds: Vec<u16>,
    queues: Vec<FedQueue>,
    counts: Vec<StreamCounts>,
    queued_cap: usize,
    stall: Duration,
    last_bytes: Instant,
    stalled: bool,
}

impl FerolStream {
    /// Listens on `address` for the FEROL of FEDs `feds` (fragments of at most
    /// `max_fragment` bytes); a queue of `queued_cap` fragments holds the stream back; a
    /// stream stopped mid-fragment for `stall` counts as stalled. One source per FED, in
    /// the order of `feds`.
    pub fn listen(
        address: SocketAddr,
        feds: Vec<u16>,
        max_fragment: usize,
        queued_cap: usize,
        stall: Duration,
    ) -> io::Result<Vec<FerolFedSource>> {
        let listener = TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let count = feds.len();
        let stream = Arc::new(Mutex::new(FerolStream {
            listener,
            address,
            connection: None,
            deframer: FerolDeframer::new(feds.clone(), max_fragment),
            feds,
            queues: (0..count).map(|_| FedQueue::default()).collect(),
            counts: vec![StreamCounts::default(); count],
            queued_cap: queued_cap.max(2),
            stall,
            last_bytes: Instant::now(),
            stalled: false,
        }));
        Ok((0..count)
            .map(|index| FerolFedSource {
                stream: Arc::clone(&stream),
                index,
            })
            .collect())
    }

    /// Accepts a FEROL's connection if none is open, then reads what the connection has.
    fn pump(&mut self) {
        if self.connection.is_none() {
            let Ok((connection, _)) = self.listener.accept() else {
                return;
            };
            // A socket that cannot be made non-blocking would block the unit: refused.
            if connection.set_nonblocking(true).is_err() {
                return;
            }
            let _ = connection.set_nodelay(true);
            self.connection = Some(connection);
            self.each(|c| c.connections += 1);
            self.last_bytes = Instant::now();
            self.stalled = false;
        }
        for _ in 0..READS_PER_CALL {
            if self.queues.iter().any(|q| q.ready.len() >= self.queued_cap) {
                return;
            }
            let Self {
                connection,
                deframer,
                feds,
                queues,
                counts,
                ..
            } = self;
            let Some(connection) = connection.as_mut() else {
                return;
            };
            let index = |fed: u16| feds.iter().position(|&f| f == fed).unwrap_or(0);
            let read = deframer.read_from(connection, |item| match item {
                FerolItem::Fragment { fed, bytes, .. } => queues[index(fed)].push(bytes),
                FerolItem::Problem { fed, problem } => {
                    let c = &mut counts[index(fed)];
                    *match problem {
                        FerolProblem::Signature => &mut c.signature,
                        FerolProblem::FedId => &mut c.fed_id,
                        FerolProblem::EventNumber => &mut c.event_number,
                        FerolProblem::PacketOrder => &mut c.packet_order,
                        FerolProblem::Length => &mut c.length,
                    } += 1;
                }
            });
            match read {
                Ok(0) => return self.closed(),
                Ok(_) => {
                    self.last_bytes = Instant::now();
                    self.stalled = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.stalled
                        && self.deframer.partial()
                        && self.last_bytes.elapsed() > self.stall
                    {
                        self.stalled = true;
                        self.each(|c| c.stalled += 1);
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Reset by the peer, or any other failure: the connection is gone.
                Err(_) => return self.closed(),
            }
        }
    }

    /// The FEROL closed its connection: counted, and the next connection starts afresh.
    fn closed(&mut self) {
        self.connection = None;
        let cut = self.deframer.reset();
        self.stalled = false;
        self.each(|c| {
            c.closed += 1;
            c.cut += u64::from(cut);
        });
    }

    fn each(&mut self, mut f: impl FnMut(&mut StreamCounts)) {
        self.counts.iter_mut().for_each(&mut f);
    }
}

/// One FED's link onto its FEROL stream.
pub struct FerolFedSource {
    stream: Arc<Mutex<FerolStream>>,
    index: usize,
}

impl FerolFedSource {
    /// Where the stream listens (its port when bound to port 0).
    pub fn address(&self) -> SocketAddr {
        self.lock().address
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FerolStream> {
        // Only the unit's own thread takes the lock; a panic there ends the unit anyway.
        self.stream.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FrameSource for FerolFedSource {
    fn next_frame(&mut self, slot: &mut [u8]) -> io::Result<Poll> {
        let mut stream = self.lock();
        if stream.queues[self.index].ready.is_empty() {
            stream.pump();
        }
        // A stream never ends by itself: a FEROL may connect again (the run's end is
        // `max_events`, `duration_s` or a stop).
        Ok(match stream.queues[self.index].pop(slot) {
            Some(len) => Poll::Frame(len),
            None => Poll::Idle,
        })
    }

    fn stream_counts(&self) -> Option<StreamCounts> {
        Some(self.lock().counts[self.index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use swdaq_format::fed::{FedHeader, FedTrailer, encode_fed_fragment};
    use swdaq_format::ferol::encode_ferol_blocks;

    fn fragment(fed: u16, event: u32, words: usize) -> Vec<u8> {
        let header = FedHeader {
            l1_id: event,
            source_id: fed,
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_fed_fragment(
            &mut out,
            &header,
            &FedTrailer::default(),
            &vec![0xA5; words * 8],
        );
        out
    }

    fn drain(sources: &mut [FerolFedSource], got: &mut [Vec<Vec<u8>>], until: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut slot = vec![0u8; 1 << 16];
        while got.iter().map(Vec::len).sum::<usize>() < until {
            assert!(Instant::now() < deadline, "stream never delivered");
            for (source, got) in sources.iter_mut().zip(got.iter_mut()) {
                if let Poll::Frame(len) = source.next_frame(&mut slot).unwrap() {
                    got.push(slot[..len].to_vec());
                }
            }
        }
    }

    /// Two FEDs on one stream: each FED's link gets its own fragments in order; a corrupt
    /// block is counted for its FED; a close mid-fragment is counted cut, and a new
    /// connection is taken.
    #[test]
    fn one_stream_serves_several_feds_and_counts_what_goes_wrong() {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut sources =
            FerolStream::listen(any, vec![4, 9], 1 << 16, 64, Duration::from_millis(50)).unwrap();
        let address = sources[0].address();
        let mut bytes = Vec::new();
        let mut want = [Vec::new(), Vec::new()];
        for event in 1..=20u32 {
            for (i, fed) in [4u16, 9].into_iter().enumerate() {
                let frag = fragment(fed, event, 700);
                let corrupt = event == 7 && fed == 9;
                encode_ferol_blocks(&frag, fed, event, &mut bytes, |k, h| {
                    if corrupt && k == 1 {
                        h.event ^= 2;
                    }
                })
                .unwrap();
                if !corrupt {
                    want[i].push(frag);
                }
            }
        }
        let mut peer = TcpStream::connect(address).unwrap();
        peer.write_all(&bytes).unwrap();
        // Part of a fragment, then the close.
        let at = bytes.len();
        encode_ferol_blocks(&fragment(4, 21, 700), 4, 21, &mut bytes, |_, _| {}).unwrap();
        let cut = &bytes[at..bytes.len() - 2000];
        peer.write_all(cut).unwrap();
        let mut got = [Vec::new(), Vec::new()];
        drain(&mut sources, &mut got, 39);
        assert_eq!(got, want);
        // Stopped mid-fragment: a stall, once.
        std::thread::sleep(Duration::from_millis(120));
        for _ in 0..3 {
            let _ = sources[0].next_frame(&mut [0; 64]).unwrap();
        }
        drop(peer);
        let deadline = Instant::now() + Duration::from_secs(10);
        while sources[1].stream_counts().unwrap().closed == 0 {
            assert!(Instant::now() < deadline);
            let _ = sources[1].next_frame(&mut [0; 64]).unwrap();
        }
        let counts = sources[1].stream_counts().unwrap();
        assert_eq!(counts.event_number, 1);
        assert_eq!(
            (
                counts.connections,
                counts.closed,
                counts.cut,
                counts.stalled
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(sources[0].stream_counts().unwrap().corrupt(), 0);
        // A new connection is taken and read.
        let mut again = Vec::new();
        encode_ferol_blocks(&fragment(4, 22, 10), 4, 22, &mut again, |_, _| {}).unwrap();
        TcpStream::connect(address)
            .unwrap()
            .write_all(&again)
            .unwrap();
        let mut got = [Vec::new(), Vec::new()];
        drain(&mut sources, &mut got, 1);
        assert_eq!(got[0], vec![fragment(4, 22, 10)]);
        assert_eq!(sources[0].stream_counts().unwrap().connections, 2);
    }
}

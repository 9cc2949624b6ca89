//! The HTTP/1.1 server under `swdaq serve`, with everything a client can make it hold
//! bounded before anyone has checked who the client is: the request head (request line and
//! headers, [`Limits::head_bytes`]), the body ([`Limits::body_bytes`], read only when the
//! handler asks for it, so after the token check), the time a request may take to arrive
//! ([`Limits::idle`]: a slow or silent connection is closed), and the connections waiting for
//! a request ([`Limits::waiting`] in all, [`Limits::waiting_per_peer`] from one address: one
//! more is answered 503 at once and closed). Connections are kept alive between requests (a
//! console polling every second reuses one), within the same idle time-out.
//!
//! A connection holds no thread until its request head is complete: one thread (the waiting
//! room) accepts, reads every waiting connection's bytes as they come (`poll`) and hands a
//! complete head to one of [`Limits::workers`] threads (through a queue as deep: beyond it,
//! 503), which reads the body if the handler wants it, answers, and hands a kept-alive
//! connection back (and one whose body it answered unread, for the room to drop the rest of
//! the body before closing: closed with bytes unread, the connection would be reset and the
//! client could lose the answer). A thread per connection from
//! its first byte let 20 clients sending a byte a second keep 16 threads busy, and the
//! operator's requests were answered 503 (65 of 84).
//!
//! Heads are parsed by `httparse`. This replaced `tiny_http`, which reads header lines of any
//! length before the handler sees the request, and gives every connection a thread of its own
//! with no read time-out: a 100 MB header took the server from 9 to 213 MB resident before its
//! 401, and 500 idle connections held 507 threads.

use crossbeam_channel::{Receiver, Sender, TrySendError};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one client may make the server hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The request line and headers together, in bytes.
    pub head_bytes: usize,
    /// The body, in bytes.
    pub body_bytes: u64,
    /// How long a whole request may take to arrive, or a kept-alive connection wait for the
    /// next one; also how long writing an answer may take.
    pub idle: Duration,
    /// Requests handled at once, each by a thread of its own.
    pub workers: usize,
    /// Connections waiting for a request's head, from all clients.
    pub waiting: usize,
    /// Connections waiting for a request's head from one address.
    pub waiting_per_peer: usize,
}

/// Headers a request may have (`httparse` parses into a fixed array).
const MAX_HEADERS: usize = 32;
/// How often a waiting read looks at the idle deadline and whether the server is stopping.
const POLL: Duration = Duration::from_millis(100);
/// How long the rest of a body answered unread is waited for before the connection closes.
const DRAIN: Duration = Duration::from_secs(1);

/// A refusal the server makes itself, before or instead of the handler: its status code and
/// why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

/// An answer: status code, content type and body.
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Extra headers (name, value).
    pub headers: Vec<(&'static str, String)>,
}

/// What a server does with requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers `request`; reads its body only if it wants it.
    fn handle(&self, request: &mut Request<'_>) -> Response;
    /// The answer to a request the server refused itself (too large, too slow, too many
    /// connections, every worker busy); nothing about the system should be in it, as no token
    /// was checked.
    fn refused(&self, peer: SocketAddr, refusal: &Refusal) -> Response;
}

/// One request: its head, and its body on demand.
pub struct Request<'a> {
    head: Head,
    peer: SocketAddr,
    keep_alive: bool,
    body_length: u64,
    body_read: bool,
    connection: &'a mut Connection,
}

impl Request<'_> {
    pub fn method(&self) -> &str {
        &self.head.method
    }

    /// The request target as sent (path and query).
    pub fn target(&self) -> &str {
        &self.head.target
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The first header called `name` (any case), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// The body's length in bytes, as the request says (`Content-Length`; 0 without one).
    pub fn body_length(&self) -> u64 {
        self.body_length
    }

    /// The body (empty without one), within [`Limits::body_bytes`] and the idle time-out.
    pub fn body(&mut self) -> Result<Vec<u8>, Refusal> {
        let waits_for_continue = self
            .header("Expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
        if waits_for_continue && self.body_length > 0 && self.connection.pending.is_empty() {
            // curl holds a larger body back until told to send it (or for a second).
            let _ = self
                .connection
                .stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let body = self.connection.read_exactly(self.body_length);
        self.body_read = body.is_ok();
        body
    }
}

/// A connection being served: the stream and the bytes read past the last request.
struct Connection {
    stream: TcpStream,
    pending: Vec<u8>,
    limits: Limits,
    closing: Arc<AtomicBool>,
}

/// How waiting for bytes ended, when it did not bring any.
enum Silence {
    /// The client closed its side.
    Closed,
    /// The idle time-out passed, or the server is stopping.
    TimedOut,
    Failed(std::io::Error),
}

impl Connection {
    /// Reads what the client has sent next into `pending`, at most `room` bytes, waiting
    /// until `deadline` at most.
    fn fill(&mut self, room: usize, deadline: Instant) -> Result<(), Silence> {
        let mut chunk = [0u8; 4096];
        let want = room.min(chunk.len());
        loop {
            if self.closing.load(Ordering::Relaxed) || Instant::now() >= deadline {
                return Err(Silence::TimedOut);
            }
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err(Silence::Closed),
                Ok(n) => {
                    self.pending.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(Silence::Failed(e)),
            }
        }
    }

    /// `length` bytes of body.
    fn read_exactly(&mut self, length: u64) -> Result<Vec<u8>, Refusal> {
        let length = usize::try_from(length).map_err(|_| too_large(self.limits))?;
        let deadline = Instant::now() + self.limits.idle;
        while self.pending.len() < length {
            let room = length - self.pending.len();
            match self.fill(room, deadline) {
                Ok(()) => {}
                Err(Silence::TimedOut) => {
                    return Err(Refusal::new(
                        408,
                        format!("body not complete within {:?}", self.limits.idle),
                    ));
                }
                Err(Silence::Closed) => return Err(Refusal::new(400, "body cut short")),
                Err(Silence::Failed(e)) => {
                    return Err(Refusal::new(400, format!("cannot read the body: {e}")));
                }
            }
        }
        Ok(self.pending.drain(..length).collect())
    }
}

/// Writes `response`, saying whether the connection stays open for another request.
fn write(stream: &mut TcpStream, response: &Response, keep_alive: bool) -> std::io::Result<()> {
    let reason = http::StatusCode::from_u16(response.code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n",
        response.code,
        response.content_type,
        response.body.len(),
        if keep_alive { "keep-alive" } else { "close" },
    );
    for (name, value) in &response.headers {
        // A value is one line whatever it holds (a file name, an error).
        let value = value.replace(|c: char| c.is_control(), " ");
        head += &format!("{name}: {value}\r\n");
    }
    head += "\r\n";
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}

fn too_large(limits: Limits) -> Refusal {
    Refusal::new(413, format!("body larger than {} bytes", limits.body_bytes))
}

/// A parsed head, owned.
struct Head {
    method: String,
    target: String,
    minor_version: u8,
    headers: Vec<(String, String)>,
}

impl Head {
    fn from(parsed: &httparse::Request<'_, '_>) -> Result<Self, Refusal> {
        let headers = parsed
            .headers
            .iter()
            .map(|h| {
                let value = std::str::from_utf8(h.value)
                    .map_err(|_| Refusal::new(400, format!("header {} is not text", h.name)))?;
                Ok((h.name.to_owned(), value.trim().to_owned()))
            })
            .collect::<Result<_, Refusal>>()?;
        Ok(Self {
            method: parsed.method.unwrap_or_default().to_owned(),
            target: parsed.path.unwrap_or_default().to_owned(),
            minor_version: parsed.version.unwrap_or_default(),
            headers,
        })
    }

    /// The first header called `name` (any case), trimmed.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn into_request(
        self,
        peer: SocketAddr,
        connection: &mut Connection,
    ) -> Result<Request<'_>, Refusal> {
        if self.header("Transfer-Encoding").is_some() {
            return Err(Refusal::new(
                411,
                "send the body with Content-Length, not Transfer-Encoding",
            ));
        }
        let body_length = match self.header("Content-Length") {
            None => 0,
            Some(text) => text
                .parse::<u64>()
                .map_err(|_| Refusal::new(400, format!("bad Content-Length {text:?}")))?,
        };
        if body_length > connection.limits.body_bytes {
            return Err(too_large(connection.limits));
        }
        let connection_header = self.header("Connection").unwrap_or_default();
        let keep_alive = if self.minor_version == 0 {
            connection_header.eq_ignore_ascii_case("keep-alive")
        } else {
            !connection_header.eq_ignore_ascii_case("close")
        };
        Ok(Request {
            head: self,
            peer,
            keep_alive,
            body_length,
            body_read: false,
            connection,
        })
    }
}

/// What a connection's bytes so far make of a request head.
enum Progress {
    Partial,
    Complete(Head),
    Refused(Refusal),
}

/// Parses the head at the start of `pending`, taking it out when complete.
fn parse_head(pending: &mut Vec<u8>, limits: Limits) -> Progress {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(pending) {
        Ok(httparse::Status::Complete(length)) => match Head::from(&parsed) {
            Ok(head) => {
                pending.drain(..length);
                Progress::Complete(head)
            }
            Err(refusal) => Progress::Refused(refusal),
        },
        Ok(httparse::Status::Partial) if pending.len() >= limits.head_bytes => {
            Progress::Refused(Refusal::new(
                431,
                format!(
                    "request line and headers larger than {} bytes",
                    limits.head_bytes
                ),
            ))
        }
        Ok(httparse::Status::Partial) => Progress::Partial,
        Err(httparse::Error::TooManyHeaders) => Progress::Refused(Refusal::new(
            431,
            format!("more than {MAX_HEADERS} headers"),
        )),
        Err(e) => Progress::Refused(Refusal::new(400, format!("malformed request: {e}"))),
    }
}

/// A connection in the waiting room: no thread is serving it until its head is complete.
struct Waiting {
    stream: TcpStream,
    peer: SocketAddr,
    pending: Vec<u8>,
    /// When its head must be complete; with nothing sent by then, it is closed unanswered.
    deadline: Instant,
    /// The bytes still to come of a body its answer was sent without: read and dropped, then
    /// the connection is closed (closed with them unread, the system would reset it, and the
    /// client could lose the answer: a refusal's reason, say).
    unread_body: u64,
}

/// A connection with a complete head, for a worker.
struct Ready {
    stream: TcpStream,
    peer: SocketAddr,
    head: Head,
    /// What came after the head (the body's start, or the next request).
    pending: Vec<u8>,
}

/// A listening server: the waiting room's thread and [`Limits::workers`] threads.
pub struct HttpServer {
    addr: SocketAddr,
    closing: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl HttpServer {
    /// Serves `handler` within `limits` on `listener` (bound by the caller, who may need
    /// the port the system chose before serving); `name` names the threads.
    pub fn start(
        listener: TcpListener,
        limits: Limits,
        handler: Arc<dyn Handler>,
        name: &str,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let closing = Arc::new(AtomicBool::new(false));
        // Room for as many complete requests as there are workers: one that finds every worker
        // just finishing its answer waits for it, not refused; beyond that, 503.
        let (to_workers, ready) = crossbeam_channel::bounded::<Ready>(limits.workers);
        // Kept-alive connections back to the waiting room, with a byte on `wake` so its
        // `poll` returns at once.
        let (back, returned) = crossbeam_channel::unbounded::<Waiting>();
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let wake = Arc::new(wake);
        let mut threads = (0..limits.workers)
            .map(|i| {
                let (ready, back, wake) = (ready.clone(), back.clone(), Arc::clone(&wake));
                let (handler, closing) = (Arc::clone(&handler), Arc::clone(&closing));
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        let worker = Worker {
                            back,
                            wake,
                            limits,
                            closing,
                        };
                        while let Ok(request) = ready.recv() {
                            worker.serve(request, &*handler);
                        }
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let room = WaitingRoom {
            listener,
            to_workers,
            returned,
            woken,
            handler,
            limits,
            waiting: Vec::new(),
        };
        let flag = Arc::clone(&closing);
        threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-wait"))
                .spawn(move || room.run(&flag))?,
        );
        Ok(Self {
            addr,
            closing,
            threads,
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends the connections (a request being handled is answered first)
    /// and waits for every thread.
    pub fn stop(self) {
        self.closing.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The one thread that accepts connections and reads them until their head is complete.
struct WaitingRoom {
    listener: TcpListener,
    to_workers: Sender<Ready>,
    returned: Receiver<Waiting>,
    woken: UnixStream,
    handler: Arc<dyn Handler>,
    limits: Limits,
    waiting: Vec<Waiting>,
}

impl WaitingRoom {
    /// Until `closing`: waits for bytes on any connection (or a new one, or one handed
    /// back), at most until the nearest deadline or [`POLL`].
    fn run(mut self, closing: &AtomicBool) {
        while !closing.load(Ordering::Relaxed) {
            let now = Instant::now();
            let nearest = self.waiting.iter().map(|w| w.deadline).min();
            // Rounded up to the next millisecond, or a deadline less than 1 ms away spins.
            let wait = nearest.map_or(POLL, |d| {
                (d.saturating_duration_since(now) + Duration::from_millis(1)).min(POLL)
            });
            let readable = match self.poll(wait) {
                Ok(readable) => readable,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    // Out of memory for the poll set: do not spin.
                    std::thread::sleep(POLL);
                    continue;
                }
            };
            // Backwards, so that taking one out leaves the indices still to visit alone.
            for i in (0..self.waiting.len()).rev() {
                if readable[2 + i] {
                    self.read(i);
                }
            }
            self.expire();
            if readable[1] {
                self.take_back();
            }
            if readable[0] {
                self.accept();
            }
        }
    }

    /// Which of the listener, the wake socket and the waiting connections have something.
    fn poll(&self, wait: Duration) -> nix::Result<Vec<bool>> {
        let mut fds = Vec::with_capacity(self.waiting.len() + 2);
        fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
        fds.push(PollFd::new(self.woken.as_fd(), PollFlags::POLLIN));
        fds.extend(
            self.waiting
                .iter()
                .map(|w| PollFd::new(w.stream.as_fd(), PollFlags::POLLIN)),
        );
        nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
        )?;
        Ok(fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect())
    }

    /// Reads what waiting connection `i` has sent; hands it on once its head is complete.
    fn read(&mut self, i: usize) {
        let w = &mut self.waiting[i];
        let mut chunk = [0u8; 4096];
        // At least 1: a head that fills `head_bytes` is refused before this is read again.
        let room = self
            .limits
            .head_bytes
            .saturating_sub(w.pending.len())
            .clamp(1, chunk.len());
        match w.stream.read(&mut chunk[..room]) {
            Ok(0) => {
                self.waiting.swap_remove(i);
            }
            Ok(n) if w.unread_body > 0 => {
                w.unread_body = w.unread_body.saturating_sub(n as u64);
                if w.unread_body == 0 {
                    self.waiting.swap_remove(i);
                }
            }
            Ok(n) => {
                w.pending.extend_from_slice(&chunk[..n]);
                let w = self.waiting.swap_remove(i);
                self.progress(w);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => {
                self.waiting.swap_remove(i);
            }
        }
    }

    /// Hands `w` to a worker if its head is complete, refuses it if the head is bad, or
    /// keeps it waiting.
    fn progress(&mut self, mut w: Waiting) {
        match parse_head(&mut w.pending, self.limits) {
            Progress::Partial => self.waiting.push(w),
            Progress::Refused(refusal) => self.refuse(w.stream, w.peer, &refusal),
            Progress::Complete(head) => {
                let request = Ready {
                    stream: w.stream,
                    peer: w.peer,
                    head,
                    pending: w.pending,
                };
                if let Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) =
                    self.to_workers.try_send(request)
                {
                    let refusal = Refusal::new(503, "every worker is busy; try again");
                    self.refuse(r.stream, r.peer, &refusal);
                }
            }
        }
    }

    /// Closes the connections past their deadline: 408 for one that sent part of a head.
    fn expire(&mut self) {
        let now = Instant::now();
        for i in (0..self.waiting.len()).rev() {
            if self.waiting[i].deadline > now {
                continue;
            }
            let w = self.waiting.swap_remove(i);
            if !w.pending.is_empty() && w.unread_body == 0 {
                let refusal = Refusal::new(
                    408,
                    format!("request not complete within {:?}", self.limits.idle),
                );
                self.refuse(w.stream, w.peer, &refusal);
            }
        }
    }

    /// Takes back the kept-alive connections the workers have answered.
    fn take_back(&mut self) {
        let mut drained = [0u8; 64];
        while matches!((&self.woken).read(&mut drained), Ok(n) if n > 0) {}
        while let Ok(w) = self.returned.try_recv() {
            if w.unread_body > 0 {
                self.waiting.push(w);
            } else {
                // The client may have sent its next request already.
                self.progress(w);
            }
        }
    }

    /// Accepts every connection pending, within [`Limits::waiting`] and
    /// [`Limits::waiting_per_peer`].
    fn accept(&mut self) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    // Out of descriptors, or the client already gone: do not spin.
                    std::thread::sleep(POLL);
                    return;
                }
            };
            let from_peer = self
                .waiting
                .iter()
                .filter(|w| w.peer.ip() == peer.ip())
                .count();
            let refusal = if self.waiting.len() >= self.limits.waiting {
                Some(format!(
                    "{} connections are waiting already; try again",
                    self.limits.waiting
                ))
            } else if from_peer >= self.limits.waiting_per_peer {
                Some(format!(
                    "{from_peer} connections from {} are waiting already; try again",
                    peer.ip()
                ))
            } else {
                None
            };
            if let Some(why) = refusal {
                self.refuse(stream, peer, &Refusal::new(503, why));
            } else if stream.set_nonblocking(true).is_ok() {
                let _ = stream.set_nodelay(true);
                self.waiting.push(Waiting {
                    stream,
                    peer,
                    pending: Vec::new(),
                    deadline: Instant::now() + self.limits.idle,
                    unread_body: 0,
                });
            }
        }
    }

    /// Answers `refusal` and closes, never waiting: the answer is small and the connection's
    /// send buffer empty, and a client that does not read it loses it.
    fn refuse(&self, mut stream: TcpStream, peer: SocketAddr, refusal: &Refusal) {
        let response = self.handler.refused(peer, refusal);
        let _ = stream.set_nonblocking(true);
        let _ = write(&mut stream, &response, false);
    }
}

/// What every worker thread shares: the way back to the waiting room.
struct Worker {
    back: Sender<Waiting>,
    wake: Arc<UnixStream>,
    limits: Limits,
    closing: Arc<AtomicBool>,
}

impl Worker {
    /// Answers one request; a connection kept alive goes back to the waiting room, and so
    /// does one whose body came unread, until the rest of it has come.
    fn serve(&self, ready: Ready, handler: &dyn Handler) {
        let Ready {
            stream,
            peer,
            head,
            pending,
        } = ready;
        if stream.set_nonblocking(false).is_err()
            || stream.set_read_timeout(Some(POLL)).is_err()
            || stream.set_write_timeout(Some(self.limits.idle)).is_err()
        {
            return;
        }
        let mut connection = Connection {
            stream,
            pending,
            limits: self.limits,
            closing: Arc::clone(&self.closing),
        };
        let (response, keep_alive, unread_body) = match head.into_request(peer, &mut connection) {
            Ok(mut request) => {
                let response = handler.handle(&mut request);
                let unread = if request.body_read {
                    0
                } else {
                    request.body_length
                };
                // A body left unread would be taken for the next request: close instead.
                (response, request.keep_alive && unread == 0, unread)
            }
            Err(refusal) => (handler.refused(peer, &refusal), false, 0),
        };
        let keep_alive = keep_alive && !self.closing.load(Ordering::Relaxed);
        // What of the unread body has not arrived yet (it is at most `body_bytes`).
        let unread_body = unread_body.saturating_sub(connection.pending.len() as u64);
        if write(&mut connection.stream, &response, keep_alive).is_err()
            || !(keep_alive || unread_body > 0)
            || connection.stream.set_nonblocking(true).is_err()
        {
            return;
        }
        let back = Waiting {
            stream: connection.stream,
            peer,
            pending: connection.pending,
            deadline: Instant::now() + if keep_alive { self.limits.idle } else { DRAIN },
            unread_body,
        };
        if self.back.send(back).is_ok() {
            // Full only when the room has bytes to read already: it will wake anyway.
            let _ = (&*self.wake).write(&[1]);
        }
    }
}

#[cfg(test)]
#[path = "http_server_tests.rs"]
mod tests;

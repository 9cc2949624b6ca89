//! The HTTP/1.1 server under `swdaq serve`, with everything a client can make it hold
//! bounded before anyone has checked who the client is: the request head (request line and
//! headers, [`Limits::head_bytes`]), the body ([`Limits::body_bytes`], read only when the
//! handler asks for it, so after the token check), the time a request may take to arrive
//! ([`Limits::idle`]: a slow or silent connection is closed), and the connections served at
//! once, one thread each ([`Limits::connections`]: one more is answered 503 at once and
//! closed). Connections are kept alive between requests (a console polling every second
//! reuses one), within the same idle time-out.
//!
//! Heads are parsed by `httparse`. This replaced `tiny_http`, which reads header lines of any
//! length before the handler sees the request, and gives every connection a thread of its own
//! with no read time-out: a 100 MB header took the server from 9 to 213 MB resident before its
//! 401, and 500 idle connections held 507 threads.

use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
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
    /// Connections served at once, each by a thread of its own.
    pub connections: usize,
}

/// Headers a request may have (`httparse` parses into a fixed array).
const MAX_HEADERS: usize = 32;
/// How often a waiting read looks at the idle deadline and whether the server is stopping.
const POLL: Duration = Duration::from_millis(100);
/// How long answering "no free connection" may take on the accepting thread.
const BUSY_WRITE: Duration = Duration::from_millis(200);

/// A refusal the server makes itself, before or instead of the handler: its status code and
/// why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub reason: String,
}

impl Refusal {
    fn new(code: u16, reason: impl Into<String>) -> Self {
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
    /// The answer to a request the server refused itself (too large, too slow, no free
    /// connection); nothing about the system should be in it, as no token was checked.
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

    /// The next request's head, `None` when the connection is over (closed, idle too long,
    /// server stopping), or why it is refused.
    fn read_head(&mut self, peer: SocketAddr) -> Result<Option<Request<'_>>, Refusal> {
        let deadline = Instant::now() + self.limits.idle;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut parsed = httparse::Request::new(&mut headers);
            match parsed.parse(&self.pending) {
                Ok(httparse::Status::Complete(length)) => {
                    let head = Head::from(&parsed)?;
                    self.pending.drain(..length);
                    return head.into_request(peer, self).map(Some);
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(Refusal::new(
                        431,
                        format!("more than {MAX_HEADERS} headers"),
                    ));
                }
                Err(e) => return Err(Refusal::new(400, format!("malformed request: {e}"))),
            }
            let room = self.limits.head_bytes.saturating_sub(self.pending.len());
            if room == 0 {
                return Err(Refusal::new(
                    431,
                    format!(
                        "request line and headers larger than {} bytes",
                        self.limits.head_bytes
                    ),
                ));
            }
            match self.fill(room, deadline) {
                Ok(()) => {}
                Err(Silence::TimedOut) if !self.pending.is_empty() => {
                    return Err(Refusal::new(
                        408,
                        format!("request not complete within {:?}", self.limits.idle),
                    ));
                }
                Err(_) => return Ok(None),
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

/// A listening server: one thread accepting, [`Limits::connections`] threads serving.
pub struct HttpServer {
    addr: SocketAddr,
    closing: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl HttpServer {
    /// Listens on `addr` and serves `handler` within `limits`; `name` names the threads.
    pub fn start(
        addr: SocketAddr,
        limits: Limits,
        handler: Arc<dyn Handler>,
        name: &str,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let closing = Arc::new(AtomicBool::new(false));
        // No room: a connection is handed over only to a thread waiting for one.
        let (to_workers, connections) = crossbeam_channel::bounded::<(TcpStream, SocketAddr)>(0);
        // Each thread says it is about to wait for a connection: accepting starts only then,
        // or the first connections would be answered busy while the threads start up.
        let (ready, started) = crossbeam_channel::bounded::<()>(limits.connections);
        let mut threads = (0..limits.connections)
            .map(|i| {
                let (connections, handler) = (connections.clone(), Arc::clone(&handler));
                let (closing, ready) = (Arc::clone(&closing), ready.clone());
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        let _ = ready.send(());
                        serve_connections(&connections, &*handler, limits, &closing)
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for _ in 0..limits.connections {
            let _ = started.recv();
        }
        let flag = Arc::clone(&closing);
        threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-accept"))
                .spawn(move || accept(&listener, &to_workers, &*handler, &flag))?,
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
        // Wakes the accepting thread out of `accept`.
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let _ = TcpStream::connect_timeout(&SocketAddr::new(ip, self.addr.port()), POLL);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn accept(
    listener: &TcpListener,
    to_workers: &Sender<(TcpStream, SocketAddr)>,
    handler: &dyn Handler,
    closing: &AtomicBool,
) {
    for stream in listener.incoming() {
        if closing.load(Ordering::Relaxed) {
            return;
        }
        let accepted = stream.and_then(|s| s.peer_addr().map(|peer| (s, peer)));
        let Ok((stream, peer)) = accepted else {
            // Out of descriptors, or the client already gone: do not spin.
            std::thread::sleep(POLL);
            continue;
        };
        if let Err(TrySendError::Full((mut stream, peer))) = to_workers.try_send((stream, peer)) {
            let refusal = Refusal::new(503, "every connection is in use; try again");
            let response = handler.refused(peer, &refusal);
            let _ = stream.set_write_timeout(Some(BUSY_WRITE));
            let _ = write(&mut stream, &response, false);
        }
    }
}

fn serve_connections(
    connections: &Receiver<(TcpStream, SocketAddr)>,
    handler: &dyn Handler,
    limits: Limits,
    closing: &Arc<AtomicBool>,
) {
    while let Ok((stream, peer)) = connections.recv() {
        if stream.set_read_timeout(Some(POLL)).is_err()
            || stream.set_write_timeout(Some(limits.idle)).is_err()
        {
            continue;
        }
        let _ = stream.set_nodelay(true);
        let mut connection = Connection {
            stream,
            pending: Vec::new(),
            limits,
            closing: Arc::clone(closing),
        };
        serve(&mut connection, peer, handler);
    }
}

/// Serves one connection's requests until it closes, idles too long or is refused.
fn serve(connection: &mut Connection, peer: SocketAddr, handler: &dyn Handler) {
    loop {
        let (response, keep_alive) = match connection.read_head(peer) {
            Ok(None) => return,
            Ok(Some(mut request)) => {
                let response = handler.handle(&mut request);
                // A body left unread would be taken for the next request: close instead.
                let reusable =
                    request.keep_alive && (request.body_read || request.body_length == 0);
                (response, reusable)
            }
            Err(refusal) => (handler.refused(peer, &refusal), false),
        };
        let keep_alive = keep_alive && !connection.closing.load(Ordering::Relaxed);
        if write(&mut connection.stream, &response, keep_alive).is_err() || !keep_alive {
            return;
        }
    }
}

#[cfg(test)]
#[path = "http_server_tests.rs"]
mod tests;

//! Tests of `http_server`.

use super::*;
use std::io::BufRead;

/// Answers with the request's method, target and body length, reading the body only
/// for POST.
struct Echo;

impl Handler for Echo {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        let body = if request.method() == "POST" {
            match request.body() {
                Ok(b) => b.len().to_string(),
                Err(refusal) => return self.refused(request.peer(), &refusal),
            }
        } else {
            "unread".into()
        };
        text(
            200,
            format!("{} {} {body}", request.method(), request.target()),
        )
    }

    fn refused(&self, _: SocketAddr, refusal: &Refusal) -> Response {
        text(refusal.code, refusal.reason.clone())
    }
}

fn text(code: u16, body: String) -> Response {
    Response {
        code,
        content_type: "text/plain",
        body: body.into_bytes(),
        headers: Vec::new(),
    }
}

const TEST_LIMITS: Limits = Limits {
    head_bytes: 1024,
    body_bytes: 100,
    // Long enough that a loaded machine sending a head in one write is not taken for idle.
    idle: Duration::from_secs(1),
    workers: 2,
    waiting: 8,
    waiting_per_peer: 4,
};

fn server() -> HttpServer {
    server_with(TEST_LIMITS)
}

fn server_with(limits: Limits) -> HttpServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    HttpServer::start(listener, limits, Arc::new(Echo), "test-http").unwrap()
}

fn connect(server: &HttpServer) -> TcpStream {
    let s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Reads one answer: status code, `Connection` header, body.
fn answer(reader: &mut impl BufRead) -> (u16, String, String) {
    answer_if_any(reader).expect("the connection was closed unanswered")
}

/// Reads one answer, or `None` when the server closed the connection without one (a
/// connection that sent nothing, closed once idle).
fn answer_if_any(reader: &mut impl BufRead) -> Option<(u16, String, String)> {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    if line.is_empty() {
        return None;
    }
    let code = line.split(' ').nth(1).unwrap().parse().unwrap();
    let (mut length, mut connection) = (0, String::new());
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let Some((name, value)) = line.trim_end().split_once(": ") else {
            break;
        };
        match name {
            "Content-Length" => length = value.parse().unwrap(),
            "Connection" => connection = value.into(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Some((code, connection, String::from_utf8(body).unwrap()))
}

fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let started = Instant::now();
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0)) && started.elapsed() < limit
}

#[test]
fn requests_on_a_kept_alive_connection_are_answered_in_turn() {
    let server = server();
    let mut s = connect(&server);
    s.write_all(b"GET /state HTTP/1.1\r\nHost: x\r\n\r\nPOST /start HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    assert_eq!(
        answer(&mut reader),
        (200, "keep-alive".into(), "GET /state unread".into())
    );
    assert_eq!(
        answer(&mut reader),
        (200, "keep-alive".into(), "POST /start 5".into())
    );
    s.write_all(b"POST /go HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        .unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    reader.read_line(&mut line).unwrap();
    s.write_all(b"abc").unwrap();
    assert_eq!(
        answer(&mut reader),
        (200, "keep-alive".into(), "POST /go 3".into())
    );
    s.write_all(b"GET /again HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(
        answer(&mut reader),
        (200, "close".into(), "GET /again unread".into())
    );
    server.stop();
}

#[test]
fn a_head_beyond_the_limit_is_refused_without_reading_it_all() {
    let server = server();
    let mut request = b"GET /state HTTP/1.1\r\nX-Pad: ".to_vec();
    request.resize(1 << 20, b'a');
    // The server answers and closes after `head_bytes`: the rest may not be taken.
    let mut s = connect(&server);
    let _ = s.write_all(&request);
    let (code, connection, why) = answer(&mut std::io::BufReader::new(s));
    assert_eq!((code, connection.as_str()), (431, "close"), "{why}");
    assert!(why.contains("larger than 1024 bytes"), "{why}");
    server.stop();
}

#[test]
fn too_many_headers_or_too_large_a_body_is_refused() {
    let server = server();
    let mut s = connect(&server);
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("X-{i}: y\r\n"))
        .collect();
    s.write_all(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes())
        .unwrap();
    assert_eq!(answer(&mut std::io::BufReader::new(s)).0, 431);
    let mut s = connect(&server);
    s.write_all(b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
        .unwrap();
    let (code, _, why) = answer(&mut std::io::BufReader::new(s));
    assert_eq!(code, 413, "{why}");
    let mut s = connect(&server);
    s.write_all(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    assert_eq!(answer(&mut std::io::BufReader::new(s)).0, 411);
    server.stop();
}

#[test]
fn a_silent_or_slow_client_is_cut_off_after_the_idle_time() {
    let server = server();
    assert!(closed_within(&mut connect(&server), TEST_LIMITS.idle * 3));
    let mut slow = connect(&server);
    slow.write_all(b"GET /state HTTP/1.1\r\n").unwrap();
    let (code, _, why) = answer(&mut std::io::BufReader::new(slow));
    assert_eq!(code, 408, "{why}");
    let mut slow_body = connect(&server);
    slow_body
        .write_all(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    assert_eq!(answer(&mut std::io::BufReader::new(slow_body)).0, 408);
    server.stop();
}

#[test]
fn connections_beyond_the_waiting_limit_are_answered_busy_at_once() {
    let server = server();
    // Accepted in the order made: the first ones fill this address's places.
    let silent: Vec<TcpStream> = (0..TEST_LIMITS.waiting_per_peer)
        .map(|_| connect(&server))
        .collect();
    let (code, connection, why) = answer(&mut std::io::BufReader::new(connect(&server)));
    assert_eq!((code, connection.as_str()), (503, "close"), "{why}");
    assert!(
        why.contains("4 connections from 127.0.0.1 are waiting"),
        "{why}"
    );
    drop(silent);
    // Once the silent ones are gone, a new one is served.
    let served = (0..50).any(|_| {
        let mut s = connect(&server);
        s.write_all(b"GET /ok HTTP/1.1\r\n\r\n").unwrap();
        let code = answer(&mut std::io::BufReader::new(s)).0;
        code == 200 || {
            std::thread::sleep(Duration::from_millis(20));
            false
        }
    });
    assert!(served);
    server.stop();
}

#[test]
fn kept_alive_connections_hold_no_worker() {
    let server = server();
    // More kept-alive connections than workers, each answered once and left open.
    let mut held: Vec<_> = (0..TEST_LIMITS.workers + 2)
        .map(|i| {
            let mut s = connect(&server);
            s.write_all(format!("GET /hold/{i} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
            assert_eq!(answer(&mut reader).0, 200);
            (s, reader)
        })
        .collect();
    // Each can ask again, in any order, on its own connection.
    for (s, reader) in held.iter_mut().rev() {
        s.write_all(b"GET /again HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            answer(reader),
            (200, "keep-alive".into(), "GET /again unread".into())
        );
    }
    server.stop();
}

/// 20 clients each sending a head one byte every 200 ms, and again when cut off: the slow
/// loris. Another client's requests are all answered the while.
#[test]
fn slow_clients_do_not_starve_the_others() {
    let limits = Limits {
        waiting_per_peer: 32,
        waiting: 64,
        ..TEST_LIMITS
    };
    let server = server_with(limits);
    let addr = server.addr();
    let done = Arc::new(AtomicBool::new(false));
    let lorises: Vec<_> = (0..20)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        continue;
                    };
                    for byte in b"GET /slow HTTP/1.1\r\nX-Slow: " {
                        if done.load(Ordering::Relaxed) || s.write_all(&[*byte]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let codes: Vec<u16> = (0..30)
        .map(|_| {
            let mut s = connect(&server);
            s.write_all(b"GET /state HTTP/1.1\r\n\r\n").unwrap();
            let code = answer(&mut std::io::BufReader::new(s)).0;
            std::thread::sleep(Duration::from_millis(50));
            code
        })
        .collect();
    done.store(true, Ordering::Relaxed);
    for l in lorises {
        l.join().unwrap();
    }
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    server.stop();
}

/// Refuses every request without reading its body, as `swdaq serve` refuses a page's form,
/// after a while: the body has arrived by then, unread.
struct RefuseUnread;

impl Handler for RefuseUnread {
    fn handle(&self, _: &mut Request<'_>) -> Response {
        std::thread::sleep(Duration::from_millis(100));
        text(415, "not read".into())
    }

    fn refused(&self, _: SocketAddr, refusal: &Refusal) -> Response {
        text(refusal.code, refusal.reason.clone())
    }
}

#[test]
fn a_body_answered_unread_is_drained_so_the_answer_is_not_reset() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server =
        HttpServer::start(listener, TEST_LIMITS, Arc::new(RefuseUnread), "test-http").unwrap();
    for _ in 0..5 {
        let mut s = connect(&server);
        s.write_all(b"POST /start HTTP/1.1\r\nContent-Length: 50\r\n\r\n")
            .unwrap();
        // The body comes after the head has been read, before it is answered.
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(&[b'x'; 50]).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).expect("the answer, not a reset");
        assert!(answer.starts_with(b"HTTP/1.1 415"), "{answer:?}");
    }
    server.stop();
}

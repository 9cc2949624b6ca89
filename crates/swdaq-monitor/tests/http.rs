//! The HTTP endpoint over a real socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use swdaq_monitor::{MetricsServer, MonitorError, Registry, StatsThread};

fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("header end");
    (head.to_owned(), body.to_owned())
}

#[test]
fn serves_metrics_and_json() {
    let registry = Registry::new();
    let mut block = registry.block("readout-0", &[("link", "0")]);
    block
        .counter("swdaq_readout_frames_total", "Frames")
        .unwrap()
        .add(42);
    let stats = StatsThread::spawn(registry, Duration::from_millis(10)).unwrap();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), stats.cell()).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0, "ephemeral port reported");
    assert!(addr.ip().is_loopback());

    let (head, body) = get(addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_owned())
        })
        .expect("content-type");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(
        body.contains("swdaq_readout_frames_total{link=\"0\",thread=\"readout-0\"} 42\n"),
        "{body}"
    );

    let (head, body) = get(addr, "/metrics.json");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["families"][0]["series"][0]["total"], 42);

    let (head, _) = get(addr, "/nope");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    // The same port again is a clear error, not a panic.
    match MetricsServer::start(addr, stats.cell()) {
        Err(e @ MonitorError::Bind { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&addr.to_string()), "{msg}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("second bind succeeded"),
    }

    server.stop();
    stats.stop();
    // tiny_http closes its listener on its own accept thread, shortly after the stop.
    let released = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        TcpStream::connect(addr).is_err()
    });
    assert!(released, "stopped server still accepts connections");
}

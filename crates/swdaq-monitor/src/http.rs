//! The HTTP endpoint: `/metrics` (Prometheus text), `/metrics.json` (the JSON snapshot).
//!
//! Served by `tiny_http` on its own thread from the latest snapshot, so a scrape never reads
//! the data threads' blocks and costs them nothing.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use tiny_http::{Header, Method, Request, Response, Server};

use crate::stats::SnapshotCell;
use crate::{MonitorError, expose};

/// Default bind address: loopback only; expose further on purpose, not by accident.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9464);

/// A running endpoint; stopped on [`stop`](Self::stop) or drop.
pub struct MetricsServer {
    addr: SocketAddr,
    server: Arc<Server>,
    handle: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port, see [`local_addr`](Self::local_addr)) and
    /// serves snapshots from `snapshots`. A port in use is a [`MonitorError::Bind`].
    pub fn start(addr: SocketAddr, snapshots: SnapshotCell) -> Result<Self, MonitorError> {
        // Bind ourselves to keep the io::Error (AddrInUse, ...) instead of a boxed one.
        let listener =
            TcpListener::bind(addr).map_err(|source| MonitorError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| MonitorError::Bind { addr, source })?;
        let server = Server::from_listener(listener, None)
            .map(Arc::new)
            .map_err(|e| MonitorError::Http(e.to_string()))?;
        let serving = server.clone();
        let handle = std::thread::Builder::new()
            .name("swdaq-http".into())
            .spawn(move || {
                // `recv` fails only once the server is unblocked for shutdown.
                while let Ok(request) = serving.recv() {
                    respond(request, &snapshots);
                }
            })
            .map_err(MonitorError::Spawn)?;
        Ok(MetricsServer {
            addr: bound,
            server,
            handle: Some(handle),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the server thread (dropping does the same).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn respond(request: Request, snapshots: &SnapshotCell) {
    let path = request.url().split('?').next().unwrap_or("");
    let (status, content_type, body) = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => (
            200,
            expose::CONTENT_TYPE,
            expose::render_prometheus(&snapshots.get()),
        ),
        (Method::Get | Method::Head, "/metrics.json" | "/snapshot") => (
            200,
            "application/json",
            serde_json::to_string(&*snapshots.get())
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string()),
        ),
        (Method::Get | Method::Head, "/") => (
            200,
            "text/plain; charset=utf-8",
            "swdaq monitor: /metrics (Prometheus), /metrics.json (snapshot)\n".to_owned(),
        ),
        (Method::Get | Method::Head, _) => (404, "text/plain; charset=utf-8", "not found\n".into()),
        _ => (
            405,
            "text/plain; charset=utf-8",
            "method not allowed\n".into(),
        ),
    };
    let mut response = Response::from_string(body).with_status_code(status);
    if let Ok(h) = Header::from_bytes("Content-Type", content_type) {
        response = response.with_header(h);
    }
    // A client that hung up is not our problem.
    let _ = request.respond(response);
}

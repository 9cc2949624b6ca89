//! What every request to `swdaq serve` must show besides the token, so that a web page the
//! operator has open in another tab cannot use the browser against run control:
//!
//! - the `Host` it was sent to is one of the server's names (loopback names, the address it
//!   listens on, and those the operator allows with `--allow-host`): a page whose own host
//!   name is made to resolve to 127.0.0.1 (DNS rebinding) sends its own name, refused 421;
//! - an `Origin`, when the browser sends one, is the server's own (`http://` or, behind a TLS
//!   proxy, `https://`, and the `Host`): a page elsewhere — another port of this host
//!   included — is refused 403, whatever it asks, so even a request the token would let
//!   through is refused;
//! - a body is JSON and says so (`Content-Type: application/json`): the only bodies a page
//!   can send cross-origin without asking first are forms and text, refused 415.
//!
//! The answers also forbid framing (`frame-ancestors 'none'`, `X-Frame-Options`), and no
//! answer carries a CORS header, so no other page can read one.

use super::http_server::{Refusal, Request};
use std::net::{IpAddr, SocketAddr};

/// Headers on every answer: no page may frame the console, no answer is sniffed as another
/// type, and the page's address (with its token fragment stripped by browsers anyway) is
/// never sent on.
pub const ANSWER_HEADERS: [(&str, &str); 4] = [
    ("Content-Security-Policy", "frame-ancestors 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
];

/// The host names requests may be sent to, lowercase and without port.
pub struct Guard {
    hosts: Vec<String>,
}

impl Guard {
    /// Loopback names, the address listened on (unless unspecified) and `allowed`.
    pub fn new(listening: SocketAddr, allowed: &[String]) -> Self {
        let ip = listening.ip();
        let listened_on = (!ip.is_unspecified()).then(|| match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
        let mut hosts: Vec<String> = Vec::new();
        let names = ["localhost", "127.0.0.1", "[::1]"]
            .map(String::from)
            .into_iter();
        for name in names
            .chain(listened_on)
            .chain(allowed.iter().map(|h| h.to_ascii_lowercase()))
        {
            if !hosts.contains(&name) {
                hosts.push(name);
            }
        }
        Self { hosts }
    }

    /// Refuses `request` unless its `Host`, `Origin` and body type are as the module says.
    pub fn check(&self, request: &Request<'_>) -> Result<(), Refusal> {
        let Some(host) = request.header("Host") else {
            return Err(Refusal::new(400, "no Host header"));
        };
        let name = host_name(host).to_ascii_lowercase();
        if !self.hosts.contains(&name) {
            // Which names it does answer to is for the operator, not for this client.
            return Err(Refusal::new(
                421,
                format!(
                    "this server does not answer to {name:?} (its operator may allow the name with --allow-host)"
                ),
            ));
        }
        // `https`: the console through the TLS proxy the operator puts in front (same host).
        let own = |scheme: &str| {
            request
                .header("Origin")
                .is_some_and(|origin| origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")))
        };
        if let Some(origin) = request.header("Origin")
            && !own("http")
            && !own("https")
        {
            return Err(Refusal::new(
                403,
                format!("a page of {origin:?} may not use run control: only its own console"),
            ));
        }
        let content_type = request.header("Content-Type");
        let is_json = content_type.is_some_and(|t| {
            t.split(';')
                .next()
                .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
        });
        if !is_json && (content_type.is_some() || request.body_length() > 0) {
            return Err(Refusal::new(
                415,
                format!(
                    "a body must be JSON sent as application/json, not {}",
                    content_type.unwrap_or("without a Content-Type")
                ),
            ));
        }
        Ok(())
    }
}

/// The host of a `Host` header value: without its port, an IPv6 address in its brackets.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_name_loses_its_port_and_keeps_its_brackets() {
        assert_eq!(host_name("127.0.0.1:7700"), "127.0.0.1");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(host_name("[::1]:7700"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("daq-01.cern.ch:80"), "daq-01.cern.ch");
    }

    #[test]
    fn the_names_are_loopback_the_address_listened_on_and_those_allowed() {
        let g = Guard::new("10.1.2.3:7700".parse().unwrap(), &["DAQ-01.example".into()]);
        assert_eq!(
            g.hosts,
            [
                "localhost",
                "127.0.0.1",
                "[::1]",
                "10.1.2.3",
                "daq-01.example"
            ]
        );
        let any = Guard::new("0.0.0.0:7700".parse().unwrap(), &[]);
        assert_eq!(any.hosts, ["localhost", "127.0.0.1", "[::1]"]);
        let local = Guard::new("127.0.0.1:7700".parse().unwrap(), &["LOCALHOST".into()]);
        assert_eq!(
            local.hosts,
            ["localhost", "127.0.0.1", "[::1]"],
            "each name once"
        );
        let v6 = Guard::new("[fe80::1]:7700".parse().unwrap(), &[]);
        assert!(v6.hosts.contains(&"[fe80::1]".to_string()));
    }
}

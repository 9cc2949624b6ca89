//! `swdaq ctl`: the HTTP client of `swdaq serve`.

use anyhow::{Context, bail};
use serde_json::Value;
use std::time::Duration;
use swdaq_control::{Command, Method, Request};

/// Long enough for a stop to wait for the run's last records and files.
const TIMEOUT: Duration = Duration::from_secs(300);

pub struct Client {
    base: String,
    authorization: Option<String>,
    agent: ureq::Agent,
}

/// What the server answered: its status code and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Client {
    /// A client of the server at `addr` (`host:port`), showing `token` if given.
    pub fn new(addr: &str, token: Option<&str>) -> Self {
        let agent = ureq::Agent::config_builder()
            // 4xx and 5xx carry the server's message in the body: read it, not an error.
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .into();
        Self {
            base: format!("http://{addr}"),
            authorization: token.map(|t| format!("Bearer {}", t.trim())),
            agent,
        }
    }

    /// Sends the request that asks for `command`.
    pub fn send(&self, command: &Command) -> anyhow::Result<Answer> {
        let Request { method, path, body } = command.request();
        match method {
            Method::Get => self.get(path),
            Method::Post => self.post(path, body.as_ref()),
        }
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        if let Some(a) = &self.authorization {
            request = request.header("Authorization", a);
        }
        read(request.call(), &self.base, path)
    }

    pub fn post(&self, path: &str, body: Option<&Value>) -> anyhow::Result<Answer> {
        let mut request = self.agent.post(format!("{}{path}", self.base));
        if let Some(a) = &self.authorization {
            request = request.header("Authorization", a);
        }
        let response = match body {
            Some(b) => request.send_json(b),
            None => request.send_empty(),
        };
        read(response, &self.base, path)
    }
}

fn read(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    base: &str,
    path: &str,
) -> anyhow::Result<Answer> {
    let mut response = response.with_context(|| format!("no answer from {base}{path}"))?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .read_to_string()
        .with_context(|| format!("cannot read the answer of {base}{path}"))?;
    let body = serde_json::from_str(&text)
        .with_context(|| format!("{base}{path} answered {status} with a body that is not JSON"))?;
    Ok(Answer { status, body })
}

impl Answer {
    /// The body on success; the server's message as the error on 4xx and 5xx.
    pub fn into_result(self) -> anyhow::Result<Value> {
        if self.status < 400 {
            return Ok(self.body);
        }
        let message = self.body["error"].as_str().unwrap_or("(no message)");
        match self.body["state"].as_str() {
            Some(state) => bail!("{} (HTTP {}; state {state})", message, self.status),
            None => bail!("{} (HTTP {})", message, self.status),
        }
    }
}

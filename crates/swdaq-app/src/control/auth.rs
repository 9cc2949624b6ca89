//! Who may steer the system: only a client that shows the bearer token. Loopback is no
//! proof (any web page the operator has open can send requests to 127.0.0.1), so a server
//! given no token makes one, as Jupyter does, and keeps it where only the user can read it
//! ([`kept_token_path`]); `swdaq ctl` finds it there, and the console gets it once in the
//! URL the server prints. Beyond loopback the operator must give the token. The token is
//! compared in constant time (`subtle`), so the answer's timing says nothing about how much
//! of a guess was right. The scheme is `Bearer` in any case (RFC 9110 makes schemes
//! case-insensitive).

use anyhow::{Context, bail};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// The environment variable a token is read from when no file is given.
pub const TOKEN_ENV: &str = "SWDAQ_TOKEN";

/// The shortest token accepted, in characters. A token is guessed online, one request a
/// guess: 16 characters, even hex digits alone, are 2^64 guesses, millions of years at far
/// more requests a second than the server answers. `openssl rand -hex 16` makes 32.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The longest token accepted, in characters: with `Bearer `, it fits in the request head a
/// server takes (`http::LIMITS`) with room to spare for a browser's other headers, so a
/// token accepted at start is never refused as too large a head afterwards.
pub const MAX_TOKEN_CHARS: usize = 1024;

/// Random bytes in a token made by the server (64 hex digits).
const MADE_TOKEN_BYTES: usize = 32;

/// A shared secret; never printed.
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    pub fn new(secret: &str) -> anyhow::Result<Self> {
        let secret = secret.trim();
        if secret.is_empty() {
            bail!("the token is empty");
        }
        if secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("the token contains white space or control characters");
        }
        let length = secret.chars().count();
        if length < MIN_TOKEN_CHARS {
            bail!(
                "the token has {length} characters, fewer than {MIN_TOKEN_CHARS} (make one with `openssl rand -hex 16`)"
            );
        }
        if length > MAX_TOKEN_CHARS {
            bail!(
                "the token has {length} characters, more than {MAX_TOKEN_CHARS}: clients could not send it in a request's headers (make one with `openssl rand -hex 16`)"
            );
        }
        Ok(Self(secret.as_bytes().to_vec()))
    }

    /// The token this server keeps for clients on `port` (see [`kept_token_path`]): the one
    /// kept there if it is readable by the user alone and valid, so consoles left open keep
    /// working when the server is restarted; else a new random one, kept there. Returns it
    /// with its text (for the console URL) and where it is kept.
    pub fn kept_for(port: u16) -> anyhow::Result<(Self, String, PathBuf)> {
        let path = kept_token_path(port)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot make {} for the token", dir.display()))?;
        let mode = std::fs::metadata(dir)
            .with_context(|| format!("cannot look at {}", dir.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "{} can be entered by other users (mode {:o}): the token is not kept there (chmod 700 it, or give --token-file)",
                dir.display(),
                mode & 0o777
            );
        }
        if let Some(text) = read_private(&path)
            && let Ok(token) = Self::new(&text)
        {
            return Ok((token, text.trim().to_string(), path));
        }
        let mut secret = [0u8; MADE_TOKEN_BYTES];
        getrandom::fill(&mut secret)
            .map_err(|e| anyhow::anyhow!("no random bytes for a token: {e}"))?;
        let text = hex::encode(secret);
        // Written whole under another name, then renamed: a client never reads half a token.
        let partial = path.with_extension(format!("token.{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .with_context(|| format!("cannot write the token to {}", partial.display()))?;
        file.write_all(format!("{text}\n").as_bytes())
            .and_then(|()| std::fs::rename(&partial, &path))
            .with_context(|| format!("cannot write the token to {}", path.display()))?;
        Ok((Self::new(&text)?, text, path))
    }

    /// The token from `file` if given, else from [`TOKEN_ENV`] if set, else none.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Option<Self>> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?;
            return Self::new(&text)
                .with_context(|| format!("token file {}", path.display()))
                .map(Some);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(text) => Self::new(&text).context(TOKEN_ENV).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Whether an `Authorization` header value is `Bearer <this token>` (scheme in any case).
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some((scheme, given)) = authorization.and_then(|a| a.trim().split_once([' ', '\t']))
        else {
            return false;
        };
        scheme.eq_ignore_ascii_case("Bearer") && bool::from(given.trim().as_bytes().ct_eq(&self.0))
    }
}

/// Where a server on `port` keeps the token it made: `$XDG_RUNTIME_DIR/swdaq/serve-PORT.token`
/// (a directory of the user's alone, emptied at logout), else
/// `~/.local/share/swdaq/runtime/serve-PORT.token` (Jupyter's choices), so `swdaq ctl` of
/// the same user finds it from the port alone.
pub fn kept_token_path(port: u16) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("swdaq"),
        None => match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/share/swdaq/runtime"),
            None => bail!(
                "neither XDG_RUNTIME_DIR nor HOME is set: nowhere to keep the token (give --token-file)"
            ),
        },
    };
    Ok(dir.join(format!("serve-{port}.token")))
}

/// The text of `path` if it exists and no one but the user may read it.
fn read_private(path: &Path) -> Option<String> {
    let private = std::fs::metadata(path).ok()?.permissions().mode() & 0o077 == 0;
    private
        .then(|| std::fs::read_to_string(path).ok())
        .flatten()
}

/// The token kept for a server on `port`, for `swdaq ctl`; `None` if there is none.
pub fn read_kept_token(port: u16) -> Option<String> {
    read_private(&kept_token_path(port).ok()?)
}

/// Refuses to listen beyond loopback without a token given by the operator.
pub fn check_bind(addr: &SocketAddr, token: Option<&Token>) -> anyhow::Result<()> {
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(
            "refusing to listen on {addr} without a token: give --token-file or set {TOKEN_ENV} (or listen on 127.0.0.1)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "s3cret-token-0123";

    #[test]
    fn only_the_bearer_token_itself_is_admitted() {
        let t = Token::new(&format!("{SECRET}\n")).unwrap();
        assert!(t.admits(Some("Bearer s3cret-token-0123")));
        assert!(!t.admits(Some("Bearer s3cret-token-012X")));
        assert!(!t.admits(Some("Bearer s3cret-token")));
        assert!(!t.admits(Some("s3cret-token-0123")));
        assert!(!t.admits(Some("Basic s3cret-token-0123")));
        assert!(!t.admits(Some("Bearers3cret-token-0123")));
        assert!(!t.admits(None));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let t = Token::new(SECRET).unwrap();
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            assert!(t.admits(Some(&format!("{scheme} {SECRET}"))), "{scheme}");
        }
        assert!(t.admits(Some(&format!("Bearer \t {SECRET} "))));
    }

    #[test]
    fn an_empty_spaced_or_short_token_is_refused() {
        assert!(Token::new(" \n").is_err());
        assert!(Token::new("two words and more").is_err());
        let e = Token::new("a").unwrap_err().to_string();
        assert!(e.contains("fewer than 16"), "{e}");
        assert!(Token::new(&"x".repeat(MIN_TOKEN_CHARS - 1)).is_err());
        assert!(Token::new(&"x".repeat(MIN_TOKEN_CHARS)).is_ok());
    }

    #[test]
    fn a_token_too_long_for_the_request_head_is_refused() {
        assert!(Token::new(&"x".repeat(MAX_TOKEN_CHARS)).is_ok());
        let e = Token::new(&"x".repeat(20_000)).unwrap_err().to_string();
        assert!(e.contains("20000 characters, more than 1024"), "{e}");
    }

    #[test]
    fn beyond_loopback_a_token_is_required() {
        let any: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let e = check_bind(&any, None).unwrap_err().to_string();
        assert!(e.contains("without a token"), "{e}");
        assert!(check_bind(&any, Some(&Token::new(SECRET).unwrap())).is_ok());
        assert!(check_bind(&local, None).is_ok());
        assert!(check_bind(&"[::1]:7700".parse().unwrap(), None).is_ok());
    }

    proptest! {
        #[test]
        fn a_header_is_admitted_only_when_it_carries_the_token(
            secret in "[!-~]{16,40}",
            scheme in "[bB][eE][aA][rR][eE][rR]",
            header in proptest::option::of(".{0,60}"),
        ) {
            let t = Token::new(&secret).unwrap();
            if t.admits(header.as_deref()) {
                let h = header.unwrap_or_default();
                prop_assert!(h.trim().to_ascii_lowercase().starts_with("bearer"));
                prop_assert_eq!(h.trim()[6..].trim(), secret.as_str());
            }
            let bearer = format!("{scheme} {secret}");
            prop_assert!(t.admits(Some(&bearer)));
        }
    }
}

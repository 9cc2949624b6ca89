//! Who may steer the system: anyone on this host when `swdaq serve` listens on loopback
//! only; elsewhere only a client that shows the bearer token. The token is compared in
//! constant time (`subtle`), so the answer's timing says nothing about how much of a guess
//! was right. The scheme is `Bearer` in any case (RFC 9110 makes schemes case-insensitive).

use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The environment variable a token is read from when no file is given.
pub const TOKEN_ENV: &str = "SWDAQ_TOKEN";

/// The shortest token accepted, in characters. A token is guessed online, one request a
/// guess: 16 characters, even hex digits alone, are 2^64 guesses, millions of years at far
/// more requests a second than the server answers. `openssl rand -hex 16` makes 32.
pub const MIN_TOKEN_CHARS: usize = 16;

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
        Ok(Self(secret.as_bytes().to_vec()))
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

/// Refuses to listen beyond loopback without a token.
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

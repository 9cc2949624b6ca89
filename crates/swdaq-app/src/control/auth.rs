//! Who may steer the system: anyone on this host when `swdaq serve` listens on loopback
//! only; elsewhere only a client that shows the bearer token. The token is compared in
//! constant time (`subtle`), so the answer's timing says nothing about how much of a guess
//! was right.

use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The environment variable a token is read from when no file is given.
pub const TOKEN_ENV: &str = "SWDAQ_TOKEN";

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

    /// Whether an `Authorization` header value is `Bearer <this token>`.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(given) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
            return false;
        };
        given.trim().as_bytes().ct_eq(&self.0).into()
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

    #[test]
    fn only_the_bearer_token_itself_is_admitted() {
        let t = Token::new("s3cret-token\n").unwrap();
        assert!(t.admits(Some("Bearer s3cret-token")));
        assert!(!t.admits(Some("Bearer s3cret-tokeN")));
        assert!(!t.admits(Some("Bearer s3cret")));
        assert!(!t.admits(Some("s3cret-token")));
        assert!(!t.admits(Some("Basic s3cret-token")));
        assert!(!t.admits(None));
    }

    #[test]
    fn an_empty_or_spaced_token_is_refused() {
        assert!(Token::new(" \n").is_err());
        assert!(Token::new("two words").is_err());
    }

    #[test]
    fn beyond_loopback_a_token_is_required() {
        let any: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let e = check_bind(&any, None).unwrap_err().to_string();
        assert!(e.contains("without a token"), "{e}");
        assert!(check_bind(&any, Some(&Token::new("t").unwrap())).is_ok());
        assert!(check_bind(&local, None).is_ok());
        assert!(check_bind(&"[::1]:7700".parse().unwrap(), None).is_ok());
    }

    proptest! {
        #[test]
        fn a_header_is_admitted_exactly_when_it_carries_the_token(
            secret in "[!-~]{1,40}",
            header in proptest::option::of(".{0,60}"),
        ) {
            let t = Token::new(&secret).unwrap();
            let expected = header.as_deref().and_then(|h| h.strip_prefix("Bearer ")).map(str::trim)
                == Some(secret.as_str());
            prop_assert_eq!(t.admits(header.as_deref()), expected);
            let bearer = format!("Bearer {secret}");
            prop_assert!(t.admits(Some(&bearer)));
        }
    }
}

//! Which swdaq took a run: the binary's version, the git commit it was built from and how it
//! was built. The binary knows (its build script embeds them) and says so once at start-up
//! ([`set`]); a library used without it (tests) records its own crate version alone.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Software {
    pub version: String,
    /// `git rev-parse HEAD`, with "-dirty" when the tree had changes; "unknown" outside git.
    pub commit: String,
    /// Cargo's profile ("release", "debug").
    pub profile: String,
    /// The optimisation level and the flags given to rustc.
    pub flags: String,
}

static SOFTWARE: OnceLock<Software> = OnceLock::new();

/// The binary's facts, once (a second call keeps the first).
pub fn set(software: Software) {
    let _ = SOFTWARE.set(software);
}

pub fn get() -> Software {
    SOFTWARE.get().cloned().unwrap_or_else(|| Software {
        version: env!("CARGO_PKG_VERSION").into(),
        commit: "unknown".into(),
        profile: "unknown".into(),
        flags: String::new(),
    })
}

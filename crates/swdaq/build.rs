//! Embeds the git commit the binary is built from and how it is built, for the run registry
//! (`swdaq_registry::software`): each run records which swdaq took it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(commit) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|changes| !changes.is_empty());
            if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            }
        }
        None => "unknown".into(),
    };
    // A new commit (or checkout) changes these; a worktree has its own HEAD and log.
    for path in ["HEAD", "logs/HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let flags = format!(
        "opt-level={} debug={} rustflags={:?}",
        env("OPT_LEVEL"),
        env("DEBUG"),
        env("CARGO_ENCODED_RUSTFLAGS").replace('\u{1f}', " ")
    );
    println!("cargo:rustc-env=SWDAQ_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=SWDAQ_BUILD_PROFILE={}", env("PROFILE"));
    println!("cargo:rustc-env=SWDAQ_BUILD_FLAGS={flags}");
}

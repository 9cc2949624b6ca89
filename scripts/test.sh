#!/usr/bin/env bash
# Runs every check swdaq has, on a fresh machine too: sets up the Python test environment
# (h5py, prometheus_client, maturin, selenium, ...) in .venv, the `swdaq` Python package (built
# from crates/swdaq-py), Debian's prometheus package, Debian's chromium and chromium-driver
# for the console's browser tests and Debian's postgresql for the run registry's PostgreSQL
# tests (each skipped with a message where apt is unavailable), then
# format, the user guide (built with mdBook, installed if missing, and its links checked),
# lint, Rust tests, Python tests and a short bounded fuzz run of every parser.
# Usage: scripts/test.sh [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz=1
[[ "${1:-}" == "--no-fuzz" ]] && fuzz=0
# Each phase's heading says when it began (seconds since the start), so a slow CI run's log
# shows where the time went.
phase() { echo "== $* (at ${SECONDS}s)"; }

# A test run builds once: incremental caches would only cost minutes and gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

phase setup
scripts/setup-python.sh
scripts/setup-prometheus.sh
scripts/setup-chromium.sh
scripts/setup-postgresql.sh
scripts/setup-xrootd.sh
export SWDAQ_PYTHON="$PWD/.venv/bin/python"

phase cargo fmt
cargo fmt --all -- --check
phase docs
scripts/build-docs.sh
phase cargo clippy
cargo clippy --workspace --all-targets -- -D warnings
phase cargo test
cargo test --workspace
if compgen -G "tests/python/test_*.py" >/dev/null; then
  phase pytest
  scripts/build-python-package.sh
  # The binary `cargo test` just built: the test profile is optimised (Cargo.toml), so a
  # second, release build of the whole binary would buy these tests nothing but minutes.
  SWDAQ_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/swdaq" "$SWDAQ_PYTHON" -m pytest -q tests/python
fi
if [[ $fuzz == 1 ]]; then
  phase "fuzz (bounded)"
  scripts/fuzz.sh "${SWDAQ_FUZZ_SECONDS:-8}"
fi
phase done

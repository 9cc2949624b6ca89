#!/usr/bin/env bash
# Builds the `swdaq` Python package (crates/swdaq-py: PyO3, abi3 wheel) with maturin and
# installs it into .venv. Run scripts/setup-python.sh first (it installs maturin).
# The wheel lands in target/wheels/; usage: scripts/build-python-package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
rm -f "$target"/wheels/swdaq-*.whl
.venv/bin/maturin build --quiet --release --strip -m crates/swdaq-py/Cargo.toml -o "$target/wheels"
.venv/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$target"/wheels/swdaq-*.whl

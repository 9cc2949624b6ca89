#!/usr/bin/env bash
# Bounded fuzz run of every parser: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Installs cargo-fuzz if missing. Uses the nightly toolchain when present, otherwise the
# stable compiler with RUSTC_BOOTSTRAP=1 (cargo-fuzz needs unstable sanitizer flags).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-10}
shift || true
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --quiet
fi
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets < <(cargo "${toolchain[@]}" fuzz list)
for t in "${targets[@]}"; do
  echo "fuzz $t: ${seconds}s"
  log=$(mktemp)
  if ! cargo "${toolchain[@]}" fuzz run "$t" -- -max_total_time="$seconds" -max_len=16384 >"$log" 2>&1; then
    grep -A 4 -m 1 'panicked at' "$log" || true
    tail -n 40 "$log"
    echo "fuzz $t: FAILED (reproducer under fuzz/artifacts/$t)"
    exit 1
  fi
  grep -E '^Done [0-9]+ runs' "$log" || tail -n 3 "$log"
  rm -f "$log"
done
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s without a crash"

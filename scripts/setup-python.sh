#!/usr/bin/env bash
# Creates .venv with the Python packages the tests and examples use (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements-installed
if [[ ! -f $stamp ]] || ! cmp -s requirements-test.txt "$stamp"; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements-test.txt
  cp requirements-test.txt "$stamp"
fi

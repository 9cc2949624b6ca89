#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the console's browser tests
# (tests/python/test_console.py drives the page through Selenium and chromedriver).
# Never fails: where apt is missing, we are not root, or the install fails, it says why and
# the browser tests skip. No tool is ever let download a browser of its own.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-chromium: no apt-get here; the browser tests will skip" >&2
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "setup-chromium: not root, cannot install chromium; the browser tests will skip" >&2
  exit 0
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core; } >/tmp/setup-chromium.log 2>&1; then
  echo "setup-chromium: installing chromium failed (see /tmp/setup-chromium.log); the browser tests will skip" >&2
fi
exit 0

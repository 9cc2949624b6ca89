#!/usr/bin/env bash
# Installs Debian's prometheus package (server and promtool) for the Prometheus tests.
# Never fails: where apt is missing, we are not root, or the install fails, it says why and
# the tests that need Prometheus skip.
set -uo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-prometheus: no apt-get here; the Prometheus tests will skip" >&2
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "setup-prometheus: not root, cannot install prometheus; the Prometheus tests will skip" >&2
  exit 0
fi
# Where systemd runs, the package also starts its own service on :9090; the tests never use
# it: they start their own server on a free 127.0.0.1 port.
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } >/tmp/setup-prometheus.log 2>&1; then
  echo "setup-prometheus: installing prometheus failed (see /tmp/setup-prometheus.log); the Prometheus tests will skip" >&2
fi
exit 0

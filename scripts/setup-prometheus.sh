#!/usr/bin/env bash
# Installs Debian's prometheus package (server and promtool) for the Prometheus tests.
# Never fails: where apt is missing, we are not root, or the install fails, it says why and
# the tests that need Prometheus skip.
# Where systemd runs, the package also starts its own service on :9090; the tests never use
# it: they start their own server on a free 127.0.0.1 port.
exec "$(dirname "$0")/apt-for-tests.sh" setup-prometheus "prometheus promtool" prometheus

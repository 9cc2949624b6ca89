#!/usr/bin/env bash
# Installs Debian's xrootd-server and xrootd-client packages (the xrootd server, xrdcp and
# xrdfs) for the transfer tests, which start their own xrootd on a free 127.0.0.1 port with a
# temporary export directory (crates/swdaq-test-xrootd). Never fails: where apt is missing, we
# are not root, or the install fails, it says why and those tests skip.
exec "$(dirname "$0")/apt-for-tests.sh" setup-xrootd "xrootd xrdcp xrdfs" xrootd-server xrootd-client

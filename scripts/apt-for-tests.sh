#!/usr/bin/env bash
# Installs Debian packages some tests need: scripts/apt-for-tests.sh NAME 'COMMAND...' PACKAGE...
# NAME names the caller in its messages; nothing is done when every COMMAND is on the PATH.
# Never fails: where apt is missing, we are not root, or the install fails, it says why (the
# install's output in /tmp/NAME.log) and the tests that need the packages skip.
set -uo pipefail
name=$1 commands=$2
shift 2
missing=0
for c in $commands; do
  command -v "$c" >/dev/null 2>&1 || missing=1
done
[[ $missing == 0 ]] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$name: no apt-get here; the tests that need $* will skip" >&2
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "$name: not root, cannot install $*; the tests that need them will skip" >&2
  exit 0
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >"/tmp/$name.log" 2>&1; then
  echo "$name: installing $* failed (see /tmp/$name.log); the tests that need them will skip" >&2
fi
exit 0

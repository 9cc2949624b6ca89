#!/usr/bin/env bash
# Installs Debian's postgresql package (the server's initdb, pg_ctl and postgres) for the run
# registry's PostgreSQL tests, which start their own server in a temporary directory on a free
# 127.0.0.1 port (crates/swdaq-test-postgres). Never fails: where apt is missing, we are not
# root, or the install fails, it says why and those tests skip.
# Debian keeps the server's programs off the PATH, in /usr/lib/postgresql/VERSION/bin, where
# the tests look too: found there, nothing is installed. Where systemd runs, the package also
# starts its own cluster on :5432; the tests never use it.
for initdb in /usr/lib/postgresql/*/bin/initdb; do
  [[ -x $initdb ]] && exit 0
done
exec "$(dirname "$0")/apt-for-tests.sh" setup-postgresql "initdb pg_ctl" postgresql

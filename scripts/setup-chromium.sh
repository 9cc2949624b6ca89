#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the console's browser tests
# (tests/python/test_console.py drives the page through Selenium and chromedriver; no tool
# is ever let download a browser of its own). Never fails: where apt is missing, we are not
# root, or the install fails, it says why and the browser tests skip.
exec "$(dirname "$0")/apt-for-tests.sh" setup-chromium "chromium chromedriver" chromium chromium-driver fonts-dejavu-core

#!/usr/bin/env bash
# Installs Debian's chromium + chromium-driver (apt) for the browser tests (tests/browser,
# issue 14). Idempotent and fast when both are present: no apt call at all. No downloaded
# browser builds: Selenium is pointed at /usr/bin/chromium and /usr/bin/chromedriver and
# Selenium Manager is never asked to fetch anything (tests/browser/driver.py).
set -euo pipefail
log() { echo "[chromium] $*"; }
die() { echo "[chromium] ERROR: $*" >&2; exit 1; }

CHROMIUM=/usr/bin/chromium
DRIVER=/usr/bin/chromedriver

if [[ -x $CHROMIUM && -x $DRIVER ]]; then
  exit 0
fi
[[ $EUID -eq 0 ]] ||
  die "chromium/chromedriver missing; run as root or: sudo apt-get install -y chromium chromium-driver"
log "apt-get install -y chromium chromium-driver ..."
export DEBIAN_FRONTEND=noninteractive
# The package lists may be stale or absent in a fresh container: refresh once on failure.
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
}
[[ -x $CHROMIUM && -x $DRIVER ]] || die "apt-get finished but $CHROMIUM or $DRIVER is missing"
log "installed $("$CHROMIUM" --version 2>/dev/null | head -n 1)"

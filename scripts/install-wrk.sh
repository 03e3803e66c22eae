#!/usr/bin/env bash
# Install wrk, the HTTP load generator `python -m bench` drives, from Debian/Ubuntu packages (needs root).
set -euo pipefail
# shellcheck source=scripts/lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
if command -v wrk >/dev/null; then
  exit 0
fi
apt_install install-wrk wrk "sudo apt-get install wrk; brew install wrk"

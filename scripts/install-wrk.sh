#!/usr/bin/env bash
# Install wrk, the HTTP load generator `python -m bench` drives, from Debian/Ubuntu packages (needs root).
set -euo pipefail
if command -v wrk >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-wrk: run as root (or: sudo apt-get install wrk; brew install wrk)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends wrk >/dev/null

#!/usr/bin/env bash
# Install and run the webhook on https://localhost:9443 with a self-signed CA made on the spot (no cluster needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/hami-webhook local "$@"

#!/usr/bin/env bash
# Install the project with its test and bench extras, lint it, and run the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench
bash scripts/install-hooks.sh # a contributor's commits get the history's rules (nothing on CI)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Install the project with its test and bench extras, lint it, and run the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench
bash scripts/install-hooks.sh # a contributor's commits get the history's rules (nothing on CI)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# One pytest worker per core (pytest-xdist), a module's (or class's) tests kept together so each worker starts a
# shared control plane at most once, handed out in tests/tiers.py's order (modules with a cluster test first:
# xdist's own reorder, most tests first, would start the quick unit modules first and leave a long one for last).
# `-n 0` runs everything in this process.
exec .venv/bin/python -m pytest --numprocesses=auto --dist=loadscope --no-loadscope-reorder "$@"

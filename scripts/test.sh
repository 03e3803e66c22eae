#!/usr/bin/env bash
# Install the project with its test and bench extras, lint it, and run the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench
bash scripts/install-hooks.sh # a contributor's commits get the history's rules (nothing on CI)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy's cache beside the test binaries (scripts/kube-binaries.sh's): a fresh clone checks in 2 s, not 20 s; mypy
# checks each cached module against its source, so another clone's cache is safe to start from.
MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-webhook}/mypy} .venv/bin/mypy
# One pytest worker per core (pytest-xdist), a module's (or class's) tests kept together so each worker starts a
# shared control plane at most once, handed out in tests/tiers.py's order (modules with a cluster test first:
# xdist's own reorder, most tests first, would start the quick unit modules first and leave a long one for last).
# `-n 0` runs everything in this process.
exec .venv/bin/python -m pytest --numprocesses=auto --dist=loadscope --no-loadscope-reorder "$@"

#!/usr/bin/env bash
# Create .venv (if needed) and install the project into it, with the extras named in $1 (e.g. "test").
# Sourced by run-local.sh and test.sh so both README commands work on a fresh machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-${extras:-base}"
if [ -z "$extras" ]; then # an install with any extras includes the base
  for installed in .venv/.installed-*; do
    if [ -f "$installed" ] && [ ! setup.cfg -nt "$installed" ]; then
      stamp="$installed"
      break
    fi
  done
fi
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
  touch "$stamp"
fi

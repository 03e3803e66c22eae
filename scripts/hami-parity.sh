#!/usr/bin/env bash
# Compare hami-webhook with HAMi's own webhook built from any HAMi tree, and print the difference report:
# Pods per class (identical, each deviation docs/rules.md documents, undocumented) and the smallest Pod of each.
#
#   scripts/hami-parity.sh [HAMI_SOURCE] [--pods N] [--seed S]
#
# HAMI_SOURCE is a HAMi checkout or a `git archive` tarball of one (default: ../shared/hami-src beside the clone);
# scripts/hami-reference.sh builds it (cached by content). Exit 0: every difference is documented; 1: some is not
# (the report shows the smallest such Pod); 2-4: HAMi's webhook cannot be built here (hami-reference.sh's codes).
set -euo pipefail
source_args=()
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  source_args=(--source "$(realpath "$1")")
  shift
fi
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench >&2
exec .venv/bin/python -m tests.parity.report "${source_args[@]}" "$@"

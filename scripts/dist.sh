#!/usr/bin/env bash
# Build the operator's tools for a machine with Python 3.11+: the wheel (`hami-webhook` and `kubectl-hami`), the
# krew archive holding it, and the krew manifest for that archive with its sha256 filled in.
#
#   scripts/dist.sh [OUT] [URL]     # OUT: default dist/; URL: where the archive will be downloaded from (the
#                                   # manifest's uri; default: the GitHub release v<version> of the origin remote)
#
# Writes OUT/hami_webhook-<version>-py3-none-any.whl, OUT/kubectl-hami-<version>.tar.gz and OUT/hami.yaml, and
# prints their paths. Install (README, "The operator's tools"):
#   pipx install OUT/hami_webhook-<version>-py3-none-any.whl
#   kubectl krew install --manifest=OUT/hami.yaml --archive=OUT/kubectl-hami-<version>.tar.gz
# The archive's kubectl-hami installs the wheel beside it into a virtualenv of its own on first run (python3 on
# PATH; its dependencies from the package index pip is configured with), then runs it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)
VERSION=$(sed -n 's/^version *= *//p' "$ROOT/setup.cfg")
HOME_PAGE=$(git -C "$ROOT" remote get-url origin 2>/dev/null | sed -nE 's#^(https://|git@)github.com[:/](.*[^/])(\.git)?$#https://github.com/\2#p' | sed 's/\.git$//' || true)
URL=${2:-${HOME_PAGE:+$HOME_PAGE/releases/download/v$VERSION/kubectl-hami-$VERSION.tar.gz}}
[ -n "$URL" ] || { echo "dist.sh: no GitHub origin remote: give the URL the archive will be served from" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
WHEEL=hami_webhook-$VERSION-py3-none-any.whl
ARCHIVE=kubectl-hami-$VERSION.tar.gz

# Built from a copy: setuptools' build/ and egg-info stay out of the checkout.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$ROOT" --exclude=.git --exclude=.venv --exclude=dist --exclude='*.egg-info' --exclude=build \
  --exclude=__pycache__ -cf - . | tar -C "$work" -xf -
mkdir "$work/archive"
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$work/wheel" "$work" >&2
cp "$work/wheel/$WHEEL" "$OUT/$WHEEL"

cp "$OUT/$WHEEL" "$work/archive/"
cat >"$work/archive/kubectl-hami" <<'SH'
#!/bin/sh
# kubectl-hami from the krew archive: installs the wheel beside it into ./venv on first run, then runs it.
set -e
here=$(cd "$(dirname "$(readlink -f "$0" 2>/dev/null || echo "$0")")" && pwd)
if [ ! -f "$here/venv/.installed" ]; then  # a venv cannot move (its scripts name its python): a stamp marks it whole
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    { echo "error: kubectl hami needs Python 3.11 or newer as python3" >&2; exit 1; }
  rm -rf "$here/venv"
  python3 -m venv "$here/venv"
  "$here/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here"/hami_webhook-*.whl >&2
  touch "$here/venv/.installed"
fi
exec "$here/venv/bin/kubectl-hami" "$@"
SH
chmod 755 "$work/archive/kubectl-hami"
cp "$ROOT/README.md" "$work/archive/"
tar -C "$work/archive" -czf "$OUT/$ARCHIVE" .
SHA=$(sha256sum "$OUT/$ARCHIVE" | cut -d' ' -f1)

cat >"$OUT/hami.yaml" <<YAML
# krew's plugin manifest for kubectl-hami $VERSION; written by scripts/dist.sh for the archive beside it.
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: hami
spec:
  version: v$VERSION
  homepage: ${HOME_PAGE:-${URL%/*}}
  shortDescription: See HAMi's namespace device quota and preview hami-webhook
  description: |
    kubectl hami quota shows each namespace's device quota as hami-webhook counts it (limit, used, held, free);
    kubectl hami review shows what the API server and hami-webhook would do to the Pods of a manifest;
    kubectl hami nodes shows the devices each Node registers for HAMi.
  caveats: |
    Needs python3 (3.11 or newer): the first run installs the plugin into a virtualenv of its own.
    quota reads with your kubeconfig: bind the hami-webhook-quota-viewer roles (README).
  platforms:
    - selector:
        matchExpressions:
          - {key: os, operator: In, values: [linux, darwin]}
      uri: $URL
      sha256: $SHA
      bin: kubectl-hami
YAML
printf '%s\n' "$OUT/$WHEEL" "$OUT/$ARCHIVE" "$OUT/hami.yaml"

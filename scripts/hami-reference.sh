#!/usr/bin/env bash
# Print a directory holding HAMi's own webhook and scheduler built from a HAMi source tree, the renderer of its
# chart, and that chart: the reference the parity suite and the benchmarks compare hami-webhook with. A test
# dependency built from Go modules like scripts/kube-binaries.sh's, never vendored and never shipped.
#
#   scripts/hami-reference.sh [HAMI_SOURCE]   # stdout: the bin directory; progress on stderr
#
# HAMI_SOURCE is a HAMi checkout or a `git archive` tarball of one (default: $HAMI_SOURCE, else
# ../shared/hami-src/hami-v2.10-*.tar.gz beside the clone). The bin directory holds:
#   hami-webhook          tests/hami/webhook/main.go compiled inside a copy of HAMi's module: HAMi's handler,
#                         vendors and device-config loading, with the dependency versions HAMi's go.sum pins
#                         (cgo on: go-nvml is in the import graph, never called on the webhook path)
#   hami-scheduler        HAMi's own cmd/scheduler from the same copy, unchanged (its extender: /filter, /bind)
#   hami-registers        tests/hami/registers/main.go in the same copy: Nodes' register annotations read by
#                         every vendor's GetNodeDevices, as HAMi's scheduler reads them
#   render-device-config  tests/hami/render: Helm's engine rendering the chart's device-config.yaml, or any of
#                         its templates for a Kubernetes version
#   chart/                the tree's charts/hami, for the renderer
#   SOURCE                what was built (the path given and its content hash)
# Cache: $HAMI_KUBE_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/hami-webhook)/hami-<hash>/bin, keyed by the source's
# content and this harness. Exit 2: no HAMi source; 3: no Go toolchain; 4: the module proxy is unreachable.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE_ROOT=${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-webhook}
say() { echo "hami-reference.sh: $*" >&2; }
# shellcheck source=scripts/lib/go-cache.sh
. "$ROOT/scripts/lib/go-cache.sh"

SRC=${1:-${HAMI_SOURCE:-}}
if [ -z "$SRC" ]; then
  SRC=$(ls "$ROOT"/../shared/hami-src/hami-v*.tar.gz 2>/dev/null | sort -V | tail -1 || true)
fi
[ -n "$SRC" ] && [ -e "$SRC" ] || { say "no HAMi source (give a checkout or a tarball; looked for ../shared/hami-src)"; exit 2; }
SRC=$(cd "$(dirname "$SRC")" && pwd)/$(basename "$SRC")

# The content hash: the tarball's bytes, or the tree's Go module and chart files; plus this harness.
fingerprint() {
  {
    if [ -f "$SRC" ]; then
      sha256sum <"$SRC"
    else
      (cd "$SRC" && find go.mod go.sum pkg cmd charts/hami -type f -print0 | sort -z | xargs -0 sha256sum)
    fi
    (cd "$ROOT" && sha256sum scripts/hami-reference.sh tests/hami/webhook/main.go tests/hami/registers/main.go \
      tests/hami/render/go.* tests/hami/render/main.go)
  } | sha256sum | cut -c1-16
}

build_hami() {
  local out=$1 tree=$1/src # inside the build directory, which cached() removes if the build fails
  mkdir "$tree"
  if [ -f "$SRC" ]; then
    tar -xzf "$SRC" -C "$tree"
  else
    cp -r "$SRC" "$tree/HAMi"
  fi
  local module
  module=$(dirname "$(grep -l '^module github.com/Project-HAMi/HAMi$' "$tree"/go.mod "$tree"/*/go.mod 2>/dev/null | head -1)")
  [ -d "$module/pkg/scheduler" ] || { say "$SRC holds no HAMi module (go.mod of github.com/Project-HAMi/HAMi)"; exit 2; }
  download "$module"
  mkdir -p "$module/cmd/parity-webhook"
  cp "$ROOT/tests/hami/webhook/main.go" "$module/cmd/parity-webhook/main.go"
  say "building HAMi's webhook from $SRC (first time: a few minutes on 2 cores)"
  (cd "$module" && CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$out/hami-webhook" ./cmd/parity-webhook)
  say "building HAMi's scheduler (most of it is the webhook's packages, built above)"
  (cd "$module" && CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$out/hami-scheduler" ./cmd/scheduler)
  mkdir -p "$module/cmd/hami-registers"
  cp "$ROOT/tests/hami/registers/main.go" "$module/cmd/hami-registers/main.go"
  say "building the register reader (the vendors' GetNodeDevices, built above)"
  (cd "$module" && CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o "$out/hami-registers" ./cmd/hami-registers)
  download "$ROOT/tests/hami/render"
  say "building the chart renderer (Helm's engine)"
  (cd "$ROOT/tests/hami/render" && go build -trimpath -ldflags "-s -w" -o "$out/render-device-config" .)
  cp -r "$module/charts/hami" "$out/chart"
  printf '%s\n%s\n' "$SRC" "$KEY" >"$out/SOURCE"
  rm -rf "$tree"
}

KEY=$(fingerprint)
cached "hami-$KEY" build_hami

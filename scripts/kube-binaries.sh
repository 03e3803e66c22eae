#!/usr/bin/env bash
# Print the directory holding kube-apiserver, kube-controller-manager and etcd of one Kubernetes version,
# building them from Go modules the first time (the way envtest users get them: a test dependency, never vendored).
#
#   scripts/kube-binaries.sh [VERSION]      # stdout: the bin directory; progress on stderr. Default: the newest pinned
#   scripts/kube-binaries.sh --scheduler [VERSION]       # stdout: the directory holding that version's kube-scheduler
#                                                        # (HAMi's scheduler runs beside it; cached on its own)
#   scripts/kube-binaries.sh --versions     # the pinned versions, oldest first
#   scripts/kube-binaries.sh --pin VERSION  # (maintainers) write tests/realkube/kube/vVERSION/ from the module proxy
#   scripts/kube-binaries.sh --cert-manager              # stdout: the directory holding cert-manager-controller,
#                                                        # cert-manager-cainjector and crds/ (the pinned version)
#   scripts/kube-binaries.sh --pin-cert-manager VERSION  # (maintainers) write tests/realkube/certmanager/go.mod
#   scripts/kube-binaries.sh --promtool                  # stdout: the directory holding promtool (the pinned
#                                                        # Prometheus: the alert rules' tests run `promtool test rules`)
#   scripts/kube-binaries.sh --pin-promtool VERSION      # (maintainers) write tests/realkube/promtool/go.mod
#
# Each pinned version is a small Go module under tests/realkube/kube/vX.Y.Z/: its go.mod requires
# k8s.io/kubernetes vX.Y.Z and replaces every staging module (k8s.io/api, k8s.io/apiserver, ...; the `replace`
# block of Kubernetes' own go.mod) with its published k8s.io/<name> v0.Y.Z, because Kubernetes' own go.mod points
# them at ./staging and replace directives of a dependency are ignored. Its `tool` lines name the three commands.
# Beside it, etcd/ is a second module whose main calls etcdmain.Main, at the etcd version that Kubernetes release
# pins in build/dependencies.yaml (kept apart so etcd's dependency versions never move Kubernetes' own).
#
# cert-manager (for the manifests' cert-manager component): tests/realkube/certmanager/ is one module requiring
# github.com/cert-manager/cert-manager, with `tool` lines for its cmd/controller and cmd/cainjector. v1.11 is the
# last release whose commands live in that module: from v1.12 each command is a nested module whose path
# (github.com/cert-manager/cert-manager/controller-binary, ...) does not match its directory, so no module proxy
# serves it, and the root module's zip leaves those directories out. crds/ holds the release's
# deploy/crds/crd-*.yaml with their Helm label templates filled in as the release's cert-manager.crds.yaml has them;
# they declare no conversion webhook, so they apply without cert-manager's webhook. Tests take
# CERT_MANAGER_CONTROLLER_BIN, CERT_MANAGER_CAINJECTOR_BIN and CERT_MANAGER_CRDS (a directory) instead, when set.
#
# promtool: tests/realkube/promtool/ is one module requiring github.com/prometheus/prometheus (its Go module
# versions are v0.3MM.P for Prometheus 3.MM.P), with a `tool` line for cmd/promtool.
#
# Cache: $HAMI_KUBE_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/hami-webhook)/kube-vX.Y.Z/bin (kube-scheduler:
# kube-scheduler-vX.Y.Z/bin; cert-manager: cert-manager-vX.Y.Z/bin), stamped when complete; Go's own module and
# build caches are used as configured (GOMODCACHE, GOCACHE). A lock makes parallel callers wait for one build. Exit 3: no Go toolchain; exit 4: the
# module proxy is unreachable (for both the tests skip off CI, and fail with CI=true).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PINS=$ROOT/tests/realkube/kube
CERT_MANAGER_PIN=$ROOT/tests/realkube/certmanager
CACHE_ROOT=${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-webhook}
CERT_MANAGER=github.com/cert-manager/cert-manager
PROMTOOL_PIN=$ROOT/tests/realkube/promtool
PROMETHEUS=github.com/prometheus/prometheus
say() { echo "kube-binaries.sh: $*" >&2; }
# shellcheck source=scripts/lib/go-cache.sh
. "$ROOT/scripts/lib/go-cache.sh"

versions() { (cd "$PINS" && ls -d v*/ 2>/dev/null | tr -d / | sort -V); }

pin() {
  local v=$1 dir=$PINS/v$1 mod tmp
  command -v go >/dev/null || { say "needs go"; exit 3; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mod=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  mkdir -p "$dir/etcd"
  # The staging modules and Go version come from Kubernetes' own go.mod; staging tags are v0.<minor>.<patch>.
  python3 - "$mod" "$v" "$dir" <<'PY'
import json, subprocess, sys
mod, version, out = sys.argv[1:]
spec = json.loads(subprocess.run(["go", "mod", "edit", "-json", mod], check=True, capture_output=True, text=True).stdout)
staging = sorted(r["Old"]["Path"] for r in spec.get("Replace") or [] if r["New"]["Path"].startswith("./staging/"))
minor_patch = version.split(".", 1)[1]
lines = [f"// Pins Kubernetes v{version} for the real-cluster tests; written by scripts/kube-binaries.sh --pin.",
         "module hami-webhook/tests/realkube/kube", "", f"go {spec['Go']}", "",
         f"require k8s.io/kubernetes v{version}", "", "replace ("]
lines += [f"\t{path} => {path} v0.{minor_patch}" for path in staging]
lines += [")", "", "tool (", *(f"\tk8s.io/kubernetes/cmd/{c}" for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")), ")", ""]
open(f"{out}/go.mod", "w").write("\n".join(lines))
PY
  local etcd
  etcd=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  etcd=$(awk '/name: "etcd"/{getline; print $2; exit}' "$etcd/build/dependencies.yaml")
  cat >"$dir/etcd/main.go" <<GO
// Command etcd is etcd v$etcd's server, the version Kubernetes v$v pins in build/dependencies.yaml.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  printf '// etcd v%s for the real-cluster tests; written by scripts/kube-binaries.sh --pin.\nmodule hami-webhook/tests/realkube/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$etcd" "$etcd" >"$dir/etcd/go.mod"
  (cd "$dir" && go mod tidy >&2)
  (cd "$dir/etcd" && go mod tidy >&2)
  say "pinned Kubernetes v$v with etcd v$etcd in $dir"
}

pin_cert_manager() {
  command -v go >/dev/null || { say "needs go"; exit 3; }
  mkdir -p "$CERT_MANAGER_PIN"
  printf '%s\n' "// Pins cert-manager $1 for the real-cluster tests; written by scripts/kube-binaries.sh --pin-cert-manager." \
    "module hami-webhook/tests/realkube/certmanager" "" "go 1.24" "" "require $CERT_MANAGER $1" "" "tool (" \
    "	$CERT_MANAGER/cmd/cainjector" "	$CERT_MANAGER/cmd/controller" ")" >"$CERT_MANAGER_PIN/go.mod"
  rm -f "$CERT_MANAGER_PIN/go.sum"
  (cd "$CERT_MANAGER_PIN" && go mod tidy >&2)
  say "pinned cert-manager $1 in $CERT_MANAGER_PIN"
}

pin_promtool() {
  command -v go >/dev/null || { say "needs go"; exit 3; }
  mkdir -p "$PROMTOOL_PIN"
  printf '%s\n' "// Pins promtool for the alert rules' tests; written by scripts/kube-binaries.sh --pin-promtool." \
    "module hami-webhook/tests/realkube/promtool" "" "go 1.26.7" "" "require $PROMETHEUS $1" "" \
    "tool $PROMETHEUS/cmd/promtool" >"$PROMTOOL_PIN/go.mod"
  rm -f "$PROMTOOL_PIN/go.sum"
  (cd "$PROMTOOL_PIN" && go mod tidy >&2)
  say "pinned promtool $1 in $PROMTOOL_PIN"
}

build_promtool() {
  download "$PROMTOOL_PIN"
  say "building promtool $PROM_V (first time: several minutes on 2 cores)"
  (cd "$PROMTOOL_PIN" && go build -trimpath -ldflags "-s -w" -o "$1/promtool" "$PROMETHEUS/cmd/promtool")
  "$1/promtool" --version >&2
}

# -ldflags stamp the version a command reports (/version, kubectl version), as Kubernetes' own build does.
kube_ldflags() {
  local ver=k8s.io/component-base/version
  echo "-s -w -X $ver.gitVersion=v$V -X $ver.gitMajor=1 -X $ver.gitMinor=$(echo "$V" | cut -d. -f2)" \
    "-X $ver.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$V"
}

# build_commands OUT CMD...: Kubernetes v$V's commands from its pin.
build_commands() {
  local out=$1 src=$PINS/v$V cmd
  shift
  for cmd in "$@"; do
    say "building $cmd v$V (first time: several minutes on 2 cores)"
    (cd "$src" && go build -trimpath -ldflags "$(kube_ldflags)" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
}

build_kube() {
  local out=$1 src=$PINS/v$V
  download "$src"
  download "$src/etcd"
  build_commands "$out" kube-apiserver kube-controller-manager
  say "building etcd for v$V"
  (cd "$src/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" .)
  "$out/kube-apiserver" --version >&2
  "$out/etcd" --version >&2
}

build_scheduler() {
  download "$PINS/v$V"
  build_commands "$1" kube-scheduler
  "$1/kube-scheduler" --version >&2
}

build_cert_manager() {
  local out=$1 cmd crds
  download "$CERT_MANAGER_PIN"
  # AppVersion is what the commands log at start and the tag of the ACME solver image they would run.
  local ldflags="-s -w -X $CERT_MANAGER/pkg/util.AppVersion=$CM_V"
  for cmd in controller cainjector; do
    say "building cert-manager-$cmd $CM_V (first time: a few minutes on 2 cores)"
    (cd "$CERT_MANAGER_PIN" && go build -trimpath -ldflags "$ldflags" -o "$out/cert-manager-$cmd" "$CERT_MANAGER/cmd/$cmd")
    "$out/cert-manager-$cmd" --help >/dev/null
  done
  crds=$(cd "$CERT_MANAGER_PIN" && go list -m -f '{{.Dir}}' "$CERT_MANAGER")/deploy/crds
  mkdir "$out/crds"
  for f in "$crds"/crd-*.yaml; do
    sed -e "s/'{{ template \"cert-manager.name\" . }}'/cert-manager/" -e "s/'{{ .Release.Name }}'/cert-manager/" \
      -e "s/# Generated labels {{- include \"labels\" . | nindent 4 }}/app.kubernetes.io\/version: \"$CM_V\"/" \
      "$f" >"$out/crds/${f##*/}"
  done
  if grep -l '{{' "$out"/crds/*.yaml >&2; then
    say "cert-manager $CM_V: Helm templates left in the CRDs above; extend the substitutions in build_cert_manager"
    exit 1
  fi
}

case "${1:-}" in
--versions) versions; exit 0 ;;
--pin) pin "${2:?--pin needs a version such as 1.37.2}"; exit 0 ;;
--pin-cert-manager) pin_cert_manager "${2:?--pin-cert-manager needs a version such as v1.11.5}"; exit 0 ;;
--pin-promtool) pin_promtool "${2:?--pin-promtool needs a Go module version such as v0.316.0}"; exit 0 ;;
--promtool)
  PROM_V=$(awk -v m="$PROMETHEUS" '{ for (i = 1; i < NF; i++) if ($i == m) { print $(i + 1); exit } }' "$PROMTOOL_PIN/go.mod")
  cached "promtool-$PROM_V" build_promtool
  exit 0
  ;;
--cert-manager)
  CM_V=$(awk -v m="$CERT_MANAGER" '{ for (i = 1; i < NF; i++) if ($i == m) { print $(i + 1); exit } }' "$CERT_MANAGER_PIN/go.mod")
  cached "cert-manager-$CM_V" build_cert_manager
  exit 0
  ;;
esac

BUILD=build_kube NAME=kube
if [ "${1:-}" = --scheduler ]; then
  BUILD=build_scheduler NAME=kube-scheduler
  shift
fi
V=${1:-$(versions | tail -1)}
V=${V#v}
[ -f "$PINS/v$V/go.mod" ] || { say "v$V is not pinned (pinned: $(versions | tr '\n' ' ')); see --pin"; exit 2; }
cached "$NAME-v$V" "$BUILD"

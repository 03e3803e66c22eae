#!/usr/bin/env bash
# Print the directory holding kube-apiserver, kube-controller-manager and etcd of one Kubernetes version,
# building them from Go modules the first time (the way envtest users get them: a test dependency, never vendored).
#
#   scripts/kube-binaries.sh [VERSION]      # stdout: the bin directory; progress on stderr. Default: the newest pinned
#   scripts/kube-binaries.sh --versions     # the pinned versions, oldest first
#   scripts/kube-binaries.sh --pin VERSION  # (maintainers) write tests/realkube/kube/vVERSION/ from the module proxy
#
# Each pinned version is a small Go module under tests/realkube/kube/vX.Y.Z/: its go.mod requires
# k8s.io/kubernetes vX.Y.Z and replaces every staging module (k8s.io/api, k8s.io/apiserver, ...; the `replace`
# block of Kubernetes' own go.mod) with its published k8s.io/<name> v0.Y.Z, because Kubernetes' own go.mod points
# them at ./staging and replace directives of a dependency are ignored. Its `tool` lines name the two commands.
# Beside it, etcd/ is a second module whose main calls etcdmain.Main, at the etcd version that Kubernetes release
# pins in build/dependencies.yaml (kept apart so etcd's dependency versions never move Kubernetes' own).
#
# Cache: $HAMI_KUBE_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/hami-webhook)/kube-vX.Y.Z/bin, stamped when
# complete; Go's own module and build caches are used as configured (GOMODCACHE, GOCACHE). A lock makes parallel
# callers wait for one build. Exit 3: no Go toolchain (tests skip off CI, fail with CI=true).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PINS=$ROOT/tests/realkube/kube
say() { echo "kube-binaries.sh: $*" >&2; }

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
lines += [")", "", "tool (", "\tk8s.io/kubernetes/cmd/kube-apiserver", "\tk8s.io/kubernetes/cmd/kube-controller-manager", ")", ""]
open(f"{out}/go.mod", "w").write("\n".join(lines))
PY
  local etcd
  etcd=$(tar -xOf /dev/null 2>/dev/null; cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
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

case "${1:-}" in
--versions) versions; exit 0 ;;
--pin) pin "${2:?--pin needs a version such as 1.37.2}"; exit 0 ;;
esac

V=${1:-$(versions | tail -1)}
V=${V#v}
SRC=$PINS/v$V
[ -f "$SRC/go.mod" ] || { say "v$V is not pinned (pinned: $(versions | tr '\n' ' ')); see --pin"; exit 2; }
CACHE=${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-webhook}/kube-v$V
BIN=$CACHE/bin
STAMP=$BIN/.complete
if [ -f "$STAMP" ]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { say "needs a Go toolchain (go) to build Kubernetes v$V; none on PATH"; exit 3; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  say "another build is running into $CACHE; waiting for it"
  flock 9
fi
if [ -f "$STAMP" ]; then
  echo "$BIN"
  exit 0
fi
started=$SECONDS
OUT=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
# -ldflags stamp the version kube-apiserver reports (/version, kubectl version), as Kubernetes' own build does.
ver=k8s.io/component-base/version
ldflags="-s -w -X $ver.gitVersion=v$V -X $ver.gitMajor=1 -X $ver.gitMinor=$(echo "$V" | cut -d. -f2) -X $ver.gitTreeState=clean"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=v$V"
for cmd in kube-apiserver kube-controller-manager; do
  say "building $cmd v$V (first time: several minutes on 2 cores)"
  (cd "$SRC" && go build -trimpath -ldflags "$ldflags" -o "$OUT/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done
say "building etcd for v$V"
(cd "$SRC/etcd" && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" .)
"$OUT/kube-apiserver" --version >&2
"$OUT/etcd" --version >&2
rm -rf "$BIN"
mv "$OUT" "$BIN"
trap - EXIT
echo "Kubernetes v$V built in $((SECONDS - started)) s" >"$STAMP"
say "done in $((SECONDS - started)) s"
echo "$BIN"

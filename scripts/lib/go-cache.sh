# Sourced by the scripts that build test dependencies from Go modules (kube-binaries.sh, hami-reference.sh):
# one cache layout, one lock, one "cannot build here" exit code for the tests to read. The caller defines
# CACHE_ROOT and say().

# cached NAME BUILD: print $CACHE_ROOT/NAME/bin, first running BUILD OUTDIR (under a lock) unless it is stamped.
cached() {
  local name=$1 build=$2 cache=$CACHE_ROOT/$1 started
  local bin=$cache/bin
  if [ -f "$bin/.complete" ]; then
    echo "$bin"
    return
  fi
  command -v go >/dev/null || { say "needs a Go toolchain (go) to build $name; none on PATH"; exit 3; }
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    say "another build is running into $cache; waiting for it"
    flock 9
  fi
  if [ -f "$bin/.complete" ]; then
    echo "$bin"
    return
  fi
  started=$SECONDS
  OUT=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$OUT"' EXIT
  # The pins' go.sum are complete: -mod=readonly builds exactly them, or fails.
  export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
  "$build" "$OUT"
  rm -rf "$bin"
  mv "$OUT" "$bin"
  trap - EXIT
  echo "$name built in $((SECONDS - started)) s" >"$bin/.complete"
  say "done in $((SECONDS - started)) s"
  echo "$bin"
}

# Exit 4 when the module proxy cannot be reached, so the tests can tell "cannot build here" from a broken build.
download() {
  (cd "$1" && go mod download) || { say "cannot download the modules of $1 (is the Go module proxy reachable?)"; exit 4; }
}


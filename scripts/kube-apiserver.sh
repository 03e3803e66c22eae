#!/usr/bin/env bash
# Print the directory holding a real kube-apiserver v1.20.2, etcd and etcdctl, building them the first time.
#
# No reachable registry ships kube-apiserver binaries, but Debian 12's `kubernetes` source package holds the
# whole upstream v1.20.2 tree with vendor/, so it builds offline with Debian's Go 1.19; Debian's etcd-server
# 3.4 provides etcd. Only apt-get is used, with a private apt state directory (system apt settings and the
# installed packages are untouched; .deb files are unpacked with dpkg -x). The result is cached outside the
# repo and reused; a lock makes parallel callers wait for one build instead of building twice.
#
#   scripts/kube-apiserver.sh          # stdout: the bin directory; progress on stderr
#
# Cache: $HAMI_KUBE_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/hami-webhook/kube-v1.20.2 (bin/ is kept,
# the ~2.5 GB of build scratch is removed). First build: about 7 minutes on 2 cores.
set -euo pipefail

KUBE_UPSTREAM=1.20.2
KUBE_DEBIAN_UPSTREAM=1.20.5+really1.20.2 # Debian's upstream version string; we build its orig tarball
KUBE_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
CACHE=${HAMI_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-webhook/kube-v$KUBE_UPSTREAM}
BIN=$CACHE/bin
STAMP=$BIN/.complete

say() { echo "kube-apiserver.sh: $*" >&2; }

if [ -f "$STAMP" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  say "another build is running into $CACHE; waiting for it"
  flock 9
fi
if [ -f "$STAMP" ]; then # built by the caller we waited for
  echo "$BIN"
  exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
  say "needs apt-get and dpkg (Debian 12) to build kube-apiserver; none found"
  exit 3
}

W=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$W"' EXIT
say "building kube-apiserver v$KUBE_UPSTREAM and etcd into $BIN (scratch $W, ~2.5 GB, several minutes)"
started=$SECONDS
mkdir -p "$W"/{apt/lists/partial,apt/cache/archives/partial,debs,root,bin,src}
cd "$W"

# 1. A private apt configuration with bookworm's deb and deb-src lines, on the mirrors the system uses.
mirror=http://deb.debian.org/debian
security=http://deb.debian.org/debian-security
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mapfile -t uris < <(awk '/^URIs:/{print $2}' /etc/apt/sources.list.d/debian.sources)
  for uri in "${uris[@]}"; do
    case $uri in *security*) security=$uri ;; *) mirror=$uri ;; esac
  done
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opts=""
[ -f "$keyring" ] && opts="[signed-by=$keyring] "
for type in deb deb-src; do
  echo "$type $opts$mirror bookworm main"
  echo "$type $opts$security bookworm-security main"
done >apt/sources.list
apt_opts=(-o Dir::Etc::SourceList="$W/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$W/apt/lists" -o Dir::Cache="$W/apt/cache" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
(cd src && apt-get "${apt_opts[@]}" -qq source --download-only kubernetes)
orig=src/kubernetes_$KUBE_DEBIAN_UPSTREAM.orig.tar.gz
[ -f "$orig" ] || {
  say "Debian's kubernetes source no longer carries $KUBE_DEBIAN_UPSTREAM (found: $(ls src))"
  exit 1
}

# 2. Go 1.19, etcd, rsync (the kube build calls it) and the fixed json libraries, unpacked under $W/root.
packages=(golang-1.19-go golang-1.19-src etcd-server etcd-client rsync libpopt0
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev)
command -v make >/dev/null || packages+=(make)
(cd debs && apt-get "${apt_opts[@]}" -qq download "${packages[@]}")
for deb in debs/*.deb; do dpkg -x "$deb" root; done
cat >bin/rsync <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$W/root/usr/lib/x86_64-linux-gnu exec $W/root/usr/bin/rsync "\$@"
EOF
chmod +x bin/rsync
[ -x root/usr/bin/make ] && ln -s "$W/root/usr/bin/make" bin/make

# 3. The upstream tree. Its vendored reflect2 1.0.1 / json-iterator 1.1.10 crash under Go >= 1.18 the first
#    time a mutating webhook's patch is JSON-encoded (plain reads keep working), so take Debian's 1.0.2 / 1.1.12.
tar -C src -xzf "$orig"
K=$W/src/kubernetes-$KUBE_UPSTREAM
vendor=$K/vendor/github.com
gocode=$W/root/usr/share/gocode/src/github.com
rm -rf "$vendor/modern-go/reflect2" "$vendor/json-iterator/go"
cp -r "$gocode/modern-go/reflect2" "$vendor/modern-go/reflect2"
cp -r "$gocode/json-iterator/go" "$vendor/json-iterator/go"

# 4. Build (make generates code, then compiles cmd/kube-apiserver), offline.
(
  cd "$K"
  export PATH=$W/bin:$W/root/usr/lib/go-1.19/bin:/usr/bin:/bin:/usr/sbin:/sbin
  export GOROOT=$W/root/usr/lib/go-1.19 HOME=$W CGO_ENABLED=0 GOFLAGS= GOPROXY=off
  export KUBE_GIT_VERSION=v$KUBE_UPSTREAM KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 \
    KUBE_GIT_COMMIT=$KUBE_COMMIT
  make WHAT=cmd/kube-apiserver >&2
)

# 5. Keep the binaries, drop the rest; the stamp goes last so a half-done cache is never used.
rm -rf "$BIN"
mkdir -p "$W/out"
cp "$K/_output/bin/kube-apiserver" root/usr/bin/etcd root/usr/bin/etcdctl "$W/out/"
"$W/out/kube-apiserver" --version >&2
"$W/out/etcd" --version >&2 # all of it: `| head -1` would end etcd with SIGPIPE, failing under pipefail
mv "$W/out" "$BIN"
echo "kube-apiserver v$KUBE_UPSTREAM built in $((SECONDS - started)) s" >"$STAMP"
say "done in $((SECONDS - started)) s"
echo "$BIN"

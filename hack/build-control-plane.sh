#!/usr/bin/env bash
# Provide etcd, kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 for the ftbench test
# control plane (the scheduler places the rig's pods on its nodes as on a cluster).
#
# Recipe: /work/shared/notes/kubernetes-control-plane.md (Debian bookworm). No kind/k3s/envtest
# downloads are reachable on CI, so kube-apiserver and kube-controller-manager are built from
# Debian's `kubernetes` source package (it vendors everything; the three Kubernetes binaries), with the vendored
# github.com/modern-go/reflect2 v1.0.1 replaced by v1.0.2 (v1.0.1 segfaults under Go >= 1.18 the
# first time a custom resource is created). etcd 3.4 comes from the `etcd-server` package.
#
# Idempotent:
#   - KUBEBUILDER_ASSETS set and holding kube-apiserver + etcd  -> nothing to do.
#   - the cache already holds all four binaries                 -> exit immediately;
#     one missing (a cache from before the scheduler)           -> only that one is built.
# Binaries end up in ${FTBENCH_CACHE:-$HOME/.cache/ftbench}/k8s-1.20.2/bin/ (etcd is copied there),
# which ftbench_devcluster.ControlPlane searches after KUBEBUILDER_ASSETS.
#
# Runs as root on Debian bookworm, non-interactively. About 10 minutes on 2 cores.
set -euo pipefail

K8S_VERSION=1.20.2
DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
ORIG_TARBALL="kubernetes_1.20.5+really1.20.2.orig.tar.gz"
CACHE_ROOT="${FTBENCH_CACHE:-$HOME/.cache/ftbench}"
DEST="$CACHE_ROOT/k8s-$K8S_VERSION"
BIN="$DEST/bin"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler)
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

have_all() {
  local dir="$1"; shift
  local b
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && have_all "$KUBEBUILDER_ASSETS" kube-apiserver etcd; then
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS already provides kube-apiserver and etcd; nothing to do"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

if have_all "$BIN" "${BINARIES[@]}"; then
  log "cached binaries in $BIN"
  echo "$BIN"
  exit 0
fi

if [[ $EUID -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive

# 1. deb-src entries mirroring the existing deb entries.
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ \
  && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    log "adding deb-src entries"
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      | $SUDO tee /etc/apt/sources.list.d/debian-src.sources >/dev/null
  elif [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list \
      | $SUDO tee /etc/apt/sources.list.d/debian-src.list >/dev/null
  fi
fi

# 2. Toolchain, etcd and reflect2 v1.0.2 source.
log "apt-get update + install build dependencies"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  golang-go rsync jq etcd-server golang-github-modern-go-reflect2-dev \
  make ca-certificates dpkg-dev xz-utils openssl >/dev/null

mkdir -p "$BIN"
install -m 0755 "$(command -v etcd || echo /usr/bin/etcd)" "$BIN/etcd"

MISSING=()
for b in "${K8S_COMMANDS[@]}"; do [[ -x "$BIN/$b" ]] || MISSING+=("$b"); done
if (( ${#MISSING[@]} == 0 )); then
  log "done: binaries in $BIN"
  echo "$BIN"
  exit 0
fi

# 3. Kubernetes source from Debian.
WORK="$DEST/src"
mkdir -p "$WORK"
cd "$WORK"
if [[ ! -f "$ORIG_TARBALL" ]]; then
  log "downloading kubernetes source package $DEB_VERSION"
  apt-get source --download-only "kubernetes=$DEB_VERSION" >/dev/null 2>&1 \
    || apt-get source --download-only kubernetes >/dev/null
fi
SRC="$WORK/kubernetes-$K8S_VERSION"
if [[ ! -f "$SRC/.ftbench-patched" ]]; then
  rm -rf "$SRC"
  log "unpacking $ORIG_TARBALL"
  tar -xzf "$ORIG_TARBALL"
  [[ -d "$SRC" ]] || { log "expected $SRC after untar"; exit 1; }

  # 4. reflect2 v1.0.1 -> v1.0.2 (see header).
  log "patching vendored github.com/modern-go/reflect2 to v1.0.2"
  REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
  rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
  cp -r "$REFLECT2" "$SRC/vendor/github.com/modern-go/reflect2"
  rm -f "$SRC/vendor/github.com/modern-go/reflect2/go.mod"
  sed -i 's#github.com/modern-go/reflect2 v1.0.1#github.com/modern-go/reflect2 v1.0.2#' \
    "$SRC/go.mod" "$SRC/vendor/modules.txt"
  grep -q 'github.com/modern-go/reflect2 v1.0.2' "$SRC/vendor/modules.txt" \
    || { log "reflect2 patch did not apply to vendor/modules.txt"; exit 1; }
  touch "$SRC/.ftbench-patched"
fi

# 5. Build in a GOPATH layout.
cd "$SRC"
export GOPATH="$SRC/.go" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-}"
export GOCACHE="${GOCACHE:-$CACHE_ROOT/go-build-cache}"
mkdir -p .go/src/k8s.io
[[ -e .go/src/k8s.io/kubernetes ]] || ln -s ../../.. .go/src/k8s.io/kubernetes
WHAT=""
for b in "${MISSING[@]}"; do WHAT+=" cmd/$b"; done
log "building${WHAT} (all three take ~10 minutes on 2 cores)"
start=$SECONDS
make WHAT="${WHAT# }" >&2
log "go build took $((SECONDS - start)) s"
for b in "${MISSING[@]}"; do install -m 0755 "_output/bin/$b" "$BIN/"; done

# The source tree and Go build cache are ~GBs; the binaries are all we need.
cd "$DEST"
rm -rf "$WORK" "$CACHE_ROOT/go-build-cache"
"$BIN/kube-apiserver" --version >&2
log "done: binaries in $BIN"
echo "$BIN"

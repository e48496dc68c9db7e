#!/usr/bin/env bash
# Builds the real control plane the k8s tests start (tests/k8s/control_plane.py): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok, from their Go modules, into
# a cache outside the repository, when missing. Idempotent: what is there at the pinned
# version is left alone. Prints the directory (the tests' ATTESTED_REPLAY_K8S_BINS).
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them with replace directives,
# which only apply in the main module; so a wrapper module requires k8s.io/kubernetes and replaces
# every staging module (read from that release's own go.mod) with the published v0.<minor>.<patch>.
# etcd's modules carry replace directives too (go install refuses them): a wrapper module calls
# go.etcd.io/etcd/server/v3/etcdmain. kwok has none: go install. kwok's Logs CRD (the tests point
# pods' logs at files with it) is copied from the kwok module.
# Measured on 2 shared cores, module cache warm: 605 s for the three Kubernetes binaries
# (v1.34.4); etcd and kwok about 4 minutes together.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
# etcd 3.6 is the minor release Kubernetes 1.34 is tested with.
ETCD_VERSION="${ETCD_VERSION:-v3.6.17}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE="${ATTESTED_REPLAY_K8S_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/attested-replay/k8s-$K8S_VERSION}"
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler)
LOGS_CRD=kwok.x-k8s.io_logs.yaml

# The Go toolchain of the project's machines lives in /usr/local/go; a PATH without it is common.
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; fi
if ! command -v go >/dev/null; then
  echo "k8s-bins.sh: no Go toolchain (go) to build the control plane with" >&2
  exit 1
fi
mkdir -p "$CACHE"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# $1 binary, $2 version: true when the cache holds that binary built at that version.
cached() { [ -x "$CACHE/$1" ] && [ "$(cat "$CACHE/$1.version" 2>/dev/null)" = "$2" ]; }
# $1 binary, $2 version: move a finished build from $work/out into the cache.
install_built() {
  mv -f "$work/out/$1" "$CACHE/$1"
  echo "$2" >"$CACHE/$1.version"
}
mkdir -p "$work/out"

build_kubernetes() {
  local dir="$work/kubernetes" gomod minor ldflags pkg ctor bin
  mkdir -p "$dir" && cd "$dir"
  go mod init attested-replay.invalid/k8sbins >/dev/null 2>&1
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
  } >>go.mod
  for bin in "${KUBE_BINS[@]}"; do
    mkdir -p "cmd/$bin"
    case "$bin" in
      kube-apiserver) pkg=k8s.io/kubernetes/cmd/kube-apiserver/app; ctor=NewAPIServerCommand ;;
      kube-controller-manager) pkg=k8s.io/kubernetes/cmd/kube-controller-manager/app; ctor=NewControllerManagerCommand ;;
      kube-scheduler) pkg=k8s.io/kubernetes/cmd/kube-scheduler/app; ctor=NewSchedulerCommand ;;
    esac
    cat >"cmd/$bin/main.go" <<GO
package main

import (
	"os"

	"k8s.io/component-base/cli"
	app "$pkg"
)

func main() { os.Exit(cli.Run(app.$ctor())) }
GO
  done
  go mod tidy >/dev/null
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  for bin in "${KUBE_BINS[@]}"; do
    go build -trimpath -ldflags "$ldflags" -o "$work/out/$bin" "./cmd/$bin"
  done
  for bin in "${KUBE_BINS[@]}"; do install_built "$bin" "$K8S_VERSION"; done
}

build_etcd() {
  local dir="$work/etcd"
  mkdir -p "$dir/cmd/etcd" && cd "$dir"
  go mod init attested-replay.invalid/etcdbin >/dev/null 2>&1
  cat >cmd/etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
  go mod tidy >/dev/null
  go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" ./cmd/etcd
  install_built etcd "$ETCD_VERSION"
}

build_kwok() {
  GOBIN="$work/out" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mkdir -p "$CACHE/kwok-crds"
  cp "$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/crd/bases/$LOGS_CRD" \
    "$CACHE/kwok-crds/$LOGS_CRD"
  chmod u+w "$CACHE/kwok-crds/$LOGS_CRD"
  install_built kwok "$KWOK_VERSION"
}

kube_complete=true
for bin in "${KUBE_BINS[@]}"; do
  # A build of this script before the version stamps: the directory name carries the version.
  if [ -x "$CACHE/$bin" ] && [ ! -f "$CACHE/$bin.version" ]; then echo "$K8S_VERSION" >"$CACHE/$bin.version"; fi
  cached "$bin" "$K8S_VERSION" || kube_complete=false
done
$kube_complete || (build_kubernetes) >&2
cached etcd "$ETCD_VERSION" || (build_etcd) >&2
{ cached kwok "$KWOK_VERSION" && [ -f "$CACHE/kwok-crds/$LOGS_CRD" ]; } || (build_kwok) >&2
echo "$CACHE"

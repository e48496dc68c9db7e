#!/usr/bin/env bash
# Builds the real control plane the k8s tests start (kube-apiserver, kube-controller-manager,
# kube-scheduler) from the k8s.io/kubernetes Go module into a cache outside the repository, when
# missing. Idempotent: a complete cache directory is left alone. Prints the directory.
#
# k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them with replace directives,
# which only apply in the main module; so a wrapper module requires k8s.io/kubernetes and replaces
# every staging module (read from that release's own go.mod) with the published v0.<minor>.<patch>.
# Measured: 605 s cold build of the three binaries on 2 shared cores (module cache warm), v1.34.4.
# Not yet run by .ci/run: no test starts the control plane yet.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE="${ATTESTED_REPLAY_K8S_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/attested-replay/k8s-$K8S_VERSION}"
BINS=(kube-apiserver kube-controller-manager kube-scheduler)

complete=true
for bin in "${BINS[@]}"; do [ -x "$CACHE/$bin" ] || complete=false; done
if $complete; then echo "$CACHE"; exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init attested-replay.invalid/k8sbins >/dev/null 2>&1
gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
{
  echo "require k8s.io/kubernetes $K8S_VERSION"
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
} >>go.mod
for bin in "${BINS[@]}"; do
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
mkdir -p "$CACHE.partial"
for bin in "${BINS[@]}"; do
  go build -trimpath -ldflags "$ldflags" -o "$CACHE.partial/$bin" "./cmd/$bin"
done
rm -rf "$CACHE"
mv "$CACHE.partial" "$CACHE"
echo "$CACHE"

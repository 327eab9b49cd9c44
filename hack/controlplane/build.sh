#!/usr/bin/env bash
# Builds the real control plane the tests start on loopback (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, kwokctl and Flux's source-, kustomize- and helm-controller) from the Go module
# proxy, one wrapper go.mod per group in this folder, CGO_ENABLED=0.
#
# Besides the binaries the cache holds, from the same modules: crds/ (the CRD manifests of crds.txt, with each
# module's LICENSE), charts/ (the Helm charts of charts.txt) and kwok-stages/ (kwok's own node and pod lifecycle
# stages, which the tests' kwok runs).
#
# Cached: the binaries go to $CACHE/controlplane/<key>/bin, where <key> digests every go.mod, go.sum, this script
# and the Go version, so a second run with nothing changed takes a second. `build.sh --print-dir` prints that
# folder without building. CACHE is $KUBECTL_TRITON_CACHE, else $XDG_CACHE_HOME/kubectl-triton, else
# ~/.cache/kubectl-triton; that folder is also where `kubectl triton validate --server` looks.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KUBECTL_TRITON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-triton}"
# Bump when the way binaries are built changes (flags, names); CRDs and charts are copied afresh when crds.txt or charts.txt changes.
revision=1
key="$( (cd "$here" && cat ./*/go.mod ./*/go.sum && go env GOVERSION && echo "$revision") | sha256sum | cut -c1-16)"
k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/kubernetes/go.mod")"
dest="$cache/controlplane/${k8s_version}-${key}"
kwok_version="$(awk '$1 == "sigs.k8s.io/kwok" {print $2; exit}' "$here/kwok/go.mod")"
if [ "${1:-}" = "--print-dir" ]; then echo "$dest"; exit 0; fi

data() {  # the CRD manifests of crds.txt into $1/crds/<module>/ (with the module's LICENSE), kwok's stages
  local module dir folder out kwok
  kwok="$(cd "$here/kwok" && go mod download -json "sigs.k8s.io/kwok@$kwok_version" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  rm -rf "$1/kwok-stages"
  mkdir -p "$1/kwok-stages"
  cp -r "$kwok/kustomize/stage/node/fast" "$kwok/kustomize/stage/pod/general" "$kwok/LICENSE" "$1/kwok-stages/"
  chmod -R u+w "$1/kwok-stages"
  rm -rf "$1/crds"
  grep -v '^#' "$here/crds.txt" | while read -r module folder; do
    [ -n "$module" ] || continue
    dir="$(go mod download -json "$module" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    out="$1/crds/${module%@*}"
    mkdir -p "$out"
    cp "$dir/$folder"/*.yaml "$dir/LICENSE" "$out/"
    chmod u+w "$out"/*
    echo "$module $folder" > "$out/SOURCE"
  done
  cp "$here/crds.txt" "$1/crds/crds.txt"
  rm -rf "$1/charts"
  grep -v '^#' "$here/charts.txt" | while read -r module folder; do
    [ -n "$module" ] || continue
    dir="$(go mod download -json "$module" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    out="$1/charts/$(basename "$folder")"
    mkdir -p "$out"
    cp -r "$dir/$folder"/. "$out/"
    cp "$dir/LICENSE" "$out/LICENSE"
    chmod -R u+w "$out"
    echo "$module $folder" > "$out/SOURCE"
  done
  cp "$here/charts.txt" "$1/charts/charts.txt"
}
if [ -f "$dest/complete" ]; then
  # crds.txt is not part of the key: a changed list refreshes the manifests, not the binaries
  cmp -s "$here/crds.txt" "$dest/crds/crds.txt" && cmp -s "$here/charts.txt" "$dest/charts/charts.txt" &&
    [ -d "$dest/kwok-stages" ] || data "$dest"
  echo "control plane: cached in $dest"; exit 0
fi

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
work="$(mktemp -d "$cache/controlplane.build.XXXXXX" 2>/dev/null || { mkdir -p "$cache"; mktemp -d "$cache/controlplane.build.XXXXXX"; })"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp="$stamp -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

build() {  # group, output (a file for one package, bin/ for several), ldflags, packages...
  local group="$1" output="$2" ldflags="$3"; shift 3
  echo "control plane: building $group ($*)"
  (cd "$here/$group" && go build -ldflags "-s -w $ldflags" -o "$output" "$@")
}
build etcd "$work/bin/etcd" "" go.etcd.io/etcd/server/v3
build kwok "$work/bin/" "-X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
build flux-source "$work/bin/source-controller" "" github.com/fluxcd/source-controller
build flux-kustomize "$work/bin/kustomize-controller" "" github.com/fluxcd/kustomize-controller
build flux-helm "$work/bin/helm-controller" "" github.com/fluxcd/helm-controller
build kubernetes "$work/bin/" "$stamp" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
"$work/bin/kube-apiserver" --version >/dev/null
data "$work"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
date -u +%FT%TZ > "$dest/complete"
echo "control plane: built in $dest"
ls "$dest/bin"

#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, CoreDNS, Prometheus and Kueue from the Go
# module proxy, once per machine, cached by version under ~/.cache/assay/k8s/<version>/bin. Kueue's CRDs and webhook
# manifests are copied next to its binary (bin/kueue-manifests), so that tests need no module cache.
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with
# ./staging/...), so we build from a wrapper module that requires k8s.io/kubernetes and
# replaces each staging module k8s.io/<m> with its published v0.<minor>.<patch> release.
# etcd is built from its own wrapper module at the version k8s.io/kubernetes pins.
#
# Usage: tests/e2e/cluster/build.sh            (idempotent; prints the bin dir on success)
# Env:   ASSAY_K8S_VERSION (default below), ASSAY_K8S_CACHE (default ~/.cache/assay/k8s),
#        GOMODCACHE / GOCACHE (default under $ASSAY_K8S_CACHE), ASSAY_K8S_BUILD_JOBS (-p).
set -euo pipefail

VERSION="${ASSAY_K8S_VERSION:-v1.33.13}"
CACHE="${ASSAY_K8S_CACHE:-$HOME/.cache/assay/k8s}"
OUTDIR="$CACHE/$VERSION"
BIN="$OUTDIR/bin"
export GOMODCACHE="${GOMODCACHE:-$CACHE/gomod}"
export GOCACHE="${GOCACHE:-$CACHE/gocache}"
export GOFLAGS="-buildvcs=false -mod=mod"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
JOBS="${ASSAY_K8S_BUILD_JOBS:-$(nproc)}"

# Everything a complete cache holds: a cache completed before something was added here
# (Kueue, say) is completed again, building only what it lacks.
complete() {
  local name
  for name in kube-apiserver kube-controller-manager etcd kubelet kube-scheduler coredns prometheus kueue; do
    [[ -x "$BIN/$name" ]] || return 1
  done
  [[ -f "$BIN/kueue-manifests/webhook/manifests.yaml" && -f "$BIN/.complete" ]]
}
if complete; then
  echo "$BIN"
  exit 0
fi

# Exit 3 means "cannot build here" (no Go >= 1.24, or >= 1.25 for Kueue, or no module proxy): the e2e suite skips.
command -v go >/dev/null || { echo "build.sh: go toolchain not found" >&2; exit 3; }
go_minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [[ -z "$go_minor" || "$go_minor" -lt 24 ]]; then
  echo "build.sh: Kubernetes $VERSION needs Go >= 1.24, found $(go env GOVERSION)" >&2; exit 3
fi
mkdir -p "$BIN" "$OUTDIR/src/k8s" "$OUTDIR/src/etcd"
# One build at a time per version (CI and a developer may race).
exec 9>"$OUTDIR/.lock"
flock 9
if complete; then
  echo "$BIN"; exit 0
fi
# Written again at the end, once everything is there.
rm -f "$BIN/.complete"

start=$(date +%s)
minor="${VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${VERSION#v1.}"

# --- kubernetes wrapper module ---------------------------------------------------------
cd "$OUTDIR/src/k8s"
kmod_json=$(go mod download -json "k8s.io/kubernetes@$VERSION") || {
  echo "build.sh: cannot download k8s.io/kubernetes@$VERSION from the Go module proxy" >&2; exit 3; }
kmod=$(printf '%s' "$kmod_json" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module assay.dev/k8s-e2e-build"
  echo
  echo "go 1.24.0"
  echo
  echo "require k8s.io/kubernetes $VERSION"
  echo
  echo "replace ("
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" \
    | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
go mod tidy
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitVersion=$VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
  [[ -x "$BIN/$cmd" ]] && continue
  echo "build.sh: building $cmd $VERSION" >&2
  go build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
done

# --- etcd wrapper module (version pinned by k8s.io/kubernetes) -------------------------
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$kmod")
etcd_version="${ASSAY_ETCD_VERSION:-$etcd_version}"
cd "$OUTDIR/src/etcd"
cat > go.mod <<MOD
module assay.dev/etcd-e2e-build

go 1.24.0

require go.etcd.io/etcd/server/v3 $etcd_version
MOD
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
go mod tidy
if [[ ! -x "$BIN/etcd" ]]; then
  echo "build.sh: building etcd $etcd_version" >&2
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

# --- CoreDNS: cluster DNS for the e2e node (no replace directives: go install works) ----
COREDNS_VERSION="${ASSAY_COREDNS_VERSION:-v1.12.1}"
if [[ ! -x "$BIN/coredns" ]]; then
  echo "build.sh: building coredns $COREDNS_VERSION" >&2
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
fi

# --- Prometheus with Kubernetes service discovery (Debian's package is built without it) --
# Its go.mod replaces klog, so like Kubernetes it builds from a wrapper module that repeats
# those replace directives.
PROMETHEUS_VERSION="${ASSAY_PROMETHEUS_VERSION:-v0.53.4}"   # the module version of Prometheus 2.53.4
if [[ ! -x "$BIN/prometheus" ]]; then
  echo "build.sh: building prometheus $PROMETHEUS_VERSION" >&2
  mkdir -p "$OUTDIR/src/prometheus"
  cd "$OUTDIR/src/prometheus"
  pmod_json=$(go mod download -json "github.com/prometheus/prometheus@$PROMETHEUS_VERSION")
  pmod=$(printf '%s' "$pmod_json" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    printf 'module assay.dev/prometheus-e2e-build\n\ngo 1.24.0\n\nrequire github.com/prometheus/prometheus %s\n\n' "$PROMETHEUS_VERSION"
    sed -n '/^replace (/,/^)/p' "$pmod"
  } > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/prometheus/prometheus/cmd/prometheus"\n' > tools.go
  go mod tidy
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$BIN/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus
  mv "$BIN/prometheus.tmp" "$BIN/prometheus"
fi

# --- Kueue: the job queueing controller (no replace directives: go install works) ----------
# Its CRDs, the release's CRD patches (conversion webhooks) and its webhook manifests ship in
# the same module: they are copied beside the binary, in the module's layout.
KUEUE_VERSION="${ASSAY_KUEUE_VERSION:-v0.17.0}"
if [[ ! -x "$BIN/kueue" || ! -f "$BIN/kueue-manifests/webhook/manifests.yaml" ]]; then
  echo "build.sh: building kueue $KUEUE_VERSION" >&2
  kueue_json=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION") || {
    echo "build.sh: cannot download sigs.k8s.io/kueue@$KUEUE_VERSION from the Go module proxy" >&2; exit 3; }
  kdir=$(printf '%s' "$kueue_json" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  kueue_go_minor=$(sed -n 's/^go 1\.\([0-9]*\).*/\1/p' "$kdir/go.mod")
  if [[ "$go_minor" -lt "${kueue_go_minor:-0}" ]]; then
    echo "build.sh: Kueue $KUEUE_VERSION needs Go >= 1.$kueue_go_minor, found $(go env GOVERSION)" >&2; exit 3
  fi
  GOBIN="$OUTDIR/src/kueue-bin" go install -p "$JOBS" -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  manifests="$BIN/kueue-manifests.tmp"
  rm -rf "$manifests"
  mkdir -p "$manifests/crd/bases" "$manifests/crd/patches" "$manifests/webhook"
  install -m 0644 "$kdir"/config/components/crd/bases/*.yaml "$manifests/crd/bases/"
  install -m 0644 "$kdir"/config/components/crd/patches/*.yaml "$manifests/crd/patches/"
  install -m 0644 "$kdir/config/components/crd/kustomization.yaml" "$manifests/crd/"
  install -m 0644 "$kdir/config/components/webhook/manifests.yaml" "$manifests/webhook/"
  echo "$KUEUE_VERSION" > "$manifests/VERSION"
  rm -rf "$BIN/kueue-manifests"
  mv "$manifests" "$BIN/kueue-manifests"
  mv "$OUTDIR/src/kueue-bin/kueue" "$BIN/kueue"
fi

end=$(date +%s)
echo "$VERSION etcd=$etcd_version coredns=$COREDNS_VERSION prometheus=$PROMETHEUS_VERSION kueue=$KUEUE_VERSION built in $((end - start))s on $(nproc) cores" > "$BIN/.complete"
echo "build.sh: done in $((end - start))s" >&2
echo "$BIN"

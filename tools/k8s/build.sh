#!/usr/bin/env bash
# Build the Kubernetes tools the manifest checks need, from Go modules, into a cache keyed by their versions:
# a real kube-apiserver and etcd (for `kubectl apply --server-side --dry-run=server`), kubectl (which also
# renders kustomize), kubeconform (schema tier), and kube-controller-manager, kube-scheduler and kwok (fake
# nodes: a rollout and a drain). Prints the bin folder on stdout; logs go to stderr.
#
# Why a wrapper module: k8s.io/kubernetes replaces its 33 staging modules (k8s.io/api, ...) with ./staging
# paths, so `go install k8s.io/kubernetes/cmd/...@v1.37.2` is refused. A module that requires it and pins each
# staging module to the matching published v0.x.y builds the same code. Cold: ~7-10 min on 2 cores; warm: <1 s.
# Nothing built or downloaded goes into the repository: all of it lives under $MNEMOFLOW_K8S_CACHE.
set -euo pipefail

K8S_VERSION=1.37.2        # kube-apiserver and kubectl; the staging modules are v0.37.2
ETCD_VERSION=3.7.0        # the etcd k8s.io/kubernetes v1.37.2 itself requires
KUBECONFORM_VERSION=0.8.0
KWOK_VERSION=0.8.0        # fake nodes: Deployments roll out and drains meet disruption budgets without a kubelet
KUBERNETES_VALIDATE_VERSION=1.37.0  # built-in kinds' JSON schemas (PyPI)

CACHE=${MNEMOFLOW_K8S_CACHE:-$HOME/.cache/mnemoflow-k8s}
# The interpreter whose pip fetches the schema wheel; made absolute, as the build runs in another folder.
PY=${PYTHON:-python3}
[[ "$PY" == /* || "$PY" != */* ]] || PY="$PWD/$PY"
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kubeconform-${KUBECONFORM_VERSION}_kwok-${KWOK_VERSION}_$(go env GOVERSION)"
BIN="$CACHE/$KEY/bin"
WHEEL_GLOB="$BIN/kubernetes_validate-${KUBERNETES_VALIDATE_VERSION}-*.whl"
# shellcheck disable=SC2086 # the glob is meant to expand
if [[ -f "$BIN/.complete" && -d "$BIN/kwok-stages" ]] && ls $WHEEL_GLOB > /dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi

command -v go > /dev/null || { echo "build.sh: no Go toolchain on PATH (need Go >= 1.26)" >&2; exit 2; }
# Own module and build caches, so CI caches one folder and a clean ~/go does not make the build cold.
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org}
WRAP="$CACHE/$KEY/wrapper"
mkdir -p "$BIN" "$WRAP"
log() { echo "build.sh: $*" >&2; }
# The lead measures benchmarks on the same machine: build at the lowest priority.
NICE=(nice -n 19)

cd "$WRAP"
if [[ ! -f go.mod ]]; then
  log "fetching k8s.io/kubernetes v${K8S_VERSION} go.mod"
  kmod=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [[ -f "$kmod" ]] || { log "could not download k8s.io/kubernetes@v${K8S_VERSION}"; exit 3; }
  staging_version="v0.${K8S_VERSION#1.}"
  {
    echo "module mnemoflow.local/k8s-tools"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v${K8S_VERSION}"
    echo "	go.etcd.io/etcd/server/v3 v${ETCD_VERSION}"
    echo ")"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" \
      | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod.tmp
  n=$(grep -c ' => ' go.mod.tmp)
  [[ "$n" -ge 30 ]] || { log "expected ~33 staging replaces in k8s.io/kubernetes go.mod, found $n"; exit 3; }
  mv go.mod.tmp go.mod
  log "wrapper module pins $n staging modules to $staging_version"
fi

ver="k8s.io/component-base/version"
minor=${K8S_VERSION#1.}
ldflags="-s -w -X $ver.gitVersion=v${K8S_VERSION} -X $ver.gitMajor=1 -X $ver.gitMinor=${minor%%.*}"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"
for cmd in kube-apiserver kubectl kube-controller-manager kube-scheduler; do
  if [[ ! -x "$BIN/$cmd" ]]; then
    log "building $cmd v${K8S_VERSION} (slow when cold)"
    "${NICE[@]}" go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  fi
done
if [[ ! -x "$BIN/etcd" ]]; then
  log "building etcd v${ETCD_VERSION}"
  "${NICE[@]}" go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" "go.etcd.io/etcd/server/v3"
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi
if [[ ! -x "$BIN/kubeconform" ]]; then
  log "building kubeconform v${KUBECONFORM_VERSION}"
  GOBIN="$BIN" "${NICE[@]}" go install -trimpath -ldflags "-s -w" \
    "github.com/yannh/kubeconform/cmd/kubeconform@v${KUBECONFORM_VERSION}"
fi
if [[ ! -x "$BIN/kwok" ]]; then
  log "building kwok v${KWOK_VERSION}"
  GOBIN="$BIN" "${NICE[@]}" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v${KWOK_VERSION}"
fi
# kwok takes its node and pod lifecycles as Stage objects; use the "fast" ones its own release ships, straight
# from the module the build just downloaded (nothing of kwok's is copied into the repository).
STAGES="$BIN/kwok-stages"
if [[ ! -d "$STAGES" ]]; then
  src="$GOMODCACHE/sigs.k8s.io/kwok@v${KWOK_VERSION}/kustomize/stage"
  mkdir -p "$STAGES.tmp"
  cp "$src/node/fast/node-initialize.yaml" "$src/node/heartbeat/node-heartbeat.yaml" \
    "$src/pod/fast/pod-ready.yaml" "$src/pod/fast/pod-complete.yaml" "$src/pod/fast/pod-delete.yaml" "$STAGES.tmp/"
  mv "$STAGES.tmp" "$STAGES"
fi
# The built-in kinds' JSON schemas (k8scheck.py makes kubeconform's schema folder from them): the wheel only,
# through pip, without installing it or its dependencies.
# shellcheck disable=SC2086
if ! ls $WHEEL_GLOB > /dev/null 2>&1; then
  log "downloading kubernetes-validate ${KUBERNETES_VALIDATE_VERSION} (schemas)"
  "$PY" -m pip download --quiet --no-deps -d "$BIN" "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
fi
for b in kube-apiserver kubectl kube-controller-manager kube-scheduler etcd kubeconform kwok; do
  [[ -x "$BIN/$b" ]] || { log "missing $b after the build"; exit 4; }
done
touch "$BIN/.complete"
echo "$BIN"

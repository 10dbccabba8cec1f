#!/usr/bin/env bash
# Builds the test control plane from upstream Go sources, fetched only through the Go module
# proxy: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (one wrapper module
# around k8s.io/kubernetes), etcd, kwok and kwokctl, helm and minio. No prebuilt binary is
# downloaded. Binaries are cached by version outside the repository, so a second run is a no-op.
#
# Usage: tests/integration/controlplane/build.sh [--print-bin-dir] [COMPONENT...]
#   COMPONENT is one of kubernetes, etcd, kwok, helm, minio (default: all of them)
#   MSGSTORE_CP_CACHE  cache root (default: $HOME/.cache/msgstore-controlplane)
#   MSGSTORE_CP_JOBS   parallel build lanes (default: 2)
# The last line printed is the directory holding the binaries.
set -euo pipefail
# shellcheck source=scripts/lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib/go-build.sh"
GO_BUILD_DIE=die

# Pinned versions, chosen to build with Go 1.26 and to work together: kwok v0.8.0 is built
# against the Kubernetes 1.36 libraries, and Kubernetes 1.36 uses the etcd 3.6 client. Debian's
# etcd 3.4.23 is too old for it: kubeadm 1.36 requires at least etcd 3.5.24 (default 3.6.8), and
# the API server's watch features need fixes that landed in etcd 3.4.31/3.5.13. So etcd is
# built from its Go module like everything else, at the version kubeadm 1.36 runs, which is
# also the kind node image's (scripts/kind/lib.sh): the second build is then a link from the
# shared Go build cache instead of a second compile of etcd and its dependencies.
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
# MinIO publishes only pseudo-versions to the module proxy; this is its 2026-02-12 commit.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

BUNDLE="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}-k8sdeps_helm-${HELM_VERSION}_minio-${MINIO_VERSION##*-}"
CACHE_ROOT="${MSGSTORE_CP_CACHE:-$HOME/.cache/msgstore-controlplane}"
ROOT="$CACHE_ROOT/$BUNDLE"
BIN="$ROOT/bin"
SRC="$ROOT/src"
LOGS="$ROOT/logs"
JOBS="${MSGSTORE_CP_JOBS:-2}"

die() {
  echo "controlplane build FAILED: $*" >&2
  exit 1
}

binaries_of() {
  case "$1" in
    kubernetes) echo kube-apiserver kube-controller-manager kube-scheduler kubectl ;;
    etcd) echo etcd ;;
    kwok) echo kwok kwokctl ;;
    helm) echo helm ;;
    minio) echo minio ;;
    *) die "unknown component '$1' (known: kubernetes etcd kwok helm minio)" ;;
  esac
}

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  echo "$BIN"
  exit 0
fi

COMPONENTS=("$@")
((${#COMPONENTS[@]})) || COMPONENTS=(kubernetes etcd kwok helm minio)
WANTED=()
for component in "${COMPONENTS[@]}"; do
  list=$(binaries_of "$component") || exit 1
  read -r -a names <<<"$list"
  WANTED+=("${names[@]}")
done

wants() {
  local c
  for c in "${COMPONENTS[@]}"; do [[ "$c" == "$1" ]] && return 0; done
  return 1
}

all_present() {
  local b
  for b in "${WANTED[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

go_build_prepare controlplane "$BIN" "$ROOT" "$SRC" "$LOGS"

now() { date +%s; }
TIMES="$LOGS/build-times.txt"

# run_step NAME LOGFILE COMMAND...: runs COMMAND (at niceness $MSGSTORE_BUILD_NICE, default 0: see
# scripts/lib/go-build.sh), records its wall time, explains failure.
run_step() {
  local name=$1 log=$2
  shift 2
  local start
  start=$(now)
  echo "building $name ..." >&2
  if ! nice -n "${MSGSTORE_BUILD_NICE:-0}" "$@" >"$log" 2>&1; then
    go_build_log_failure "$log"
    die "$name did not build (full log: $log)"
  fi
  echo "$name $(($(now) - start))s" | tee -a "$TIMES" >&2
}

build_kubernetes() {
  local dir="$SRC/kubernetes"
  [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-controller-manager" && -x "$BIN/kube-scheduler" && -x "$BIN/kubectl" ]] && return 0
  go_k8s_wrapper "$dir" msgstore.test/controlplane/kubernetes ||
    die "could not prepare the Kubernetes wrapper module"
  (
    cd "$dir"
    run_step "kubernetes (kube-apiserver kube-controller-manager kube-scheduler kubectl)" \
      "$LOGS/kubernetes.log" \
      go build -ldflags "$(go_k8s_ldflags)" -o "$dir/out/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl
    mv -f out/kube-apiserver out/kube-controller-manager out/kube-scheduler out/kubectl "$BIN/"
  )
}

build_etcd() {
  local dir="$SRC/etcd"
  [[ -x "$BIN/etcd" ]] && return 0
  # The etcd server module replaces its sibling modules with ../ paths, so `go install` refuses
  # it; a wrapper module requiring it builds the same main package.
  go_wrapper_module "$dir" msgstore.test/controlplane/etcd
  (
    cd "$dir"
    go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    run_step "etcd" "$LOGS/etcd.log" go build -ldflags "-s -w" -o "$dir/out/etcd" go.etcd.io/etcd/server/v3
    mv -f out/etcd "$BIN/"
  )
}

build_kwok() {
  local dir="$SRC/kwok"
  [[ -x "$BIN/kwok" && -x "$BIN/kwokctl" ]] && return 0
  # the Kubernetes release's own library versions (see the lanes below)
  go_k8s_wrapper "$dir" msgstore.test/controlplane/kwok
  local ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}"
  (
    cd "$dir"
    go mod edit -require="sigs.k8s.io/kwok@$KWOK_VERSION"
    run_step "kwok kwokctl" "$LOGS/kwok.log" go build -ldflags "$ldflags" -o "$dir/out/" \
      sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
    mv -f out/kwok out/kwokctl "$BIN/"
  )
}

build_helm() {
  local dir="$SRC/helm"
  [[ -x "$BIN/helm" ]] && return 0
  go_wrapper_module "$dir" msgstore.test/controlplane/helm
  (
    cd "$dir"
    go mod edit -require="helm.sh/helm/v3@$HELM_VERSION"
    run_step "helm" "$LOGS/helm.log" go build \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      -o "$dir/out/helm" helm.sh/helm/v3/cmd/helm
    mv -f out/helm "$BIN/"
  )
}

build_minio() {
  local dir="$SRC/minio"
  [[ -x "$BIN/minio" ]] && return 0
  go_wrapper_module "$dir" msgstore.test/controlplane/minio
  (
    cd "$dir"
    go mod edit -require="github.com/minio/minio@$MINIO_VERSION"
    run_step "minio" "$LOGS/minio.log" go build -ldflags "-s -w" -o "$dir/out/minio" github.com/minio/minio
    mv -f out/minio "$BIN/"
  )
}

# The Kubernetes build is the longest; it runs in its own lane, followed by kwok (whose wrapper
# module requires the same Kubernetes release, so most of its packages are in the Go build
# cache by then), while the others share a second lane.
TOTAL_START=$(now)
echo "building the test control plane into $BIN (cold builds take a while; logs in $LOGS)" >&2
k8s_lane() {
  if wants kubernetes; then build_kubernetes || return 1; fi
  if wants kwok; then build_kwok || return 1; fi
}
other_lane() {
  local c
  for c in etcd helm minio; do
    if wants "$c"; then "build_$c" || return 1; fi
  done
}
if [[ "$JOBS" -ge 2 ]]; then
  k8s_lane &
  k8s_pid=$!
  lane_ok=0
  other_lane || lane_ok=1
  k8s_ok=0
  wait "$k8s_pid" || k8s_ok=1
  [[ $lane_ok -eq 0 && $k8s_ok -eq 0 ]] || die "see the messages above"
else
  k8s_lane || die "see the messages above"
  other_lane || die "see the messages above"
fi
all_present || die "some binaries are missing from $BIN after the build"
echo "total $(($(now) - TOTAL_START))s (${COMPONENTS[*]})" | tee -a "$TIMES" >&2
echo "$BIN"

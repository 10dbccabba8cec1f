#!/usr/bin/env bash
# Builds every Go binary a kind cluster needs from upstream Go modules (module proxy only, no
# prebuilt binary): kind, kubelet/kubeadm/kube-proxy, containerd (+ shim, ctr), crictl, etcd,
# CoreDNS and local-path-provisioner. kubectl and the control-plane binaries come from
# tests/integration/controlplane/build.sh (run for `kubernetes` when missing), which uses the same Go
# settings and wrapper-module technique, so both share the Go build cache.
#
# Usage: scripts/kind/build-binaries.sh [--print-bin-dir] [COMPONENT...]
#   COMPONENT: kind k8snode containerd crictl etcd coredns lpp (default: all)
#   MSGSTORE_KIND_CACHE   cache root (default: $HOME/.cache/msgstore-kind)
# Binaries land in $MSGSTORE_KIND_CACHE/<bundle>/bin; a second run is a no-op. Logs and per-step
# wall times are in <bundle>/logs. The last line printed is the binary directory.
set -euo pipefail
KIND_SCRIPT_NAME=build-binaries
# shellcheck source=scripts/kind/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/lib/go-build.sh
source "$KIND_REPO_ROOT/scripts/lib/go-build.sh"
GO_BUILD_DIE=kind_die

# containerd, crictl, CoreDNS and local-path-provisioner use the Kubernetes libraries: their
# wrapper modules require k8s.io/kubernetes@$K8S_VERSION beside them (go_k8s_wrapper), so the
# libraries resolve to that release's versions (or newer, where a tool needs it) and compile
# once, in the control-plane build, instead of once per version a tool happens to pin. They
# come after k8snode, which waits for (and reuses the build cache of) the control-plane build.
# etcd comes last: the control plane builds the same version, and by then that build (asked
# for by the other tests, beside this one) has filled the Go build cache; built beside it,
# both compiled etcd at once (207 s and 234 s in a cold run, against 2 s after it).
ALL_COMPONENTS=(kind k8snode containerd crictl coredns lpp etcd)

binaries_of() {
  case "$1" in
    kind) echo kind ;;
    k8snode) echo kubelet kubeadm kube-proxy ;;
    containerd) echo containerd containerd-shim-runc-v2 ctr ;;
    crictl) echo crictl ;;
    etcd) echo etcd ;;
    coredns) echo coredns ;;
    lpp) echo local-path-provisioner ;;
    *) kind_die "unknown component '$1' (known: ${ALL_COMPONENTS[*]})" ;;
  esac
}

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  echo "$KIND_BIN"
  exit 0
fi

COMPONENTS=("$@")
((${#COMPONENTS[@]})) || COMPONENTS=("${ALL_COMPONENTS[@]}")
for c in "${COMPONENTS[@]}"; do binaries_of "$c" >/dev/null; done

present() { # present COMPONENT: all its binaries are in the cache
  local b
  for b in $(binaries_of "$1"); do [[ -x "$KIND_BIN/$b" ]] || return 1; done
}
all_present() {
  local c
  for c in "${COMPONENTS[@]}"; do present "$c" || return 1; done
}

go_build_prepare kind "$KIND_BIN" "$KIND_ROOT" "$KIND_SRC" "$KIND_LOGS"

# run_step NAME COMMAND...: runs COMMAND (at niceness $MSGSTORE_BUILD_NICE, default 0: see
# scripts/lib/go-build.sh) in the current directory, logs to
# $KIND_LOGS/NAME.log, records its wall time, and explains a failure.
run_step() {
  local name=$1 log="$KIND_LOGS/$1.log" rc=0
  shift
  echo "  $name ..." >&2
  kind_timed "$name" nice -n "${MSGSTORE_BUILD_NICE:-0}" "$@" >"$log" 2>&1 || rc=$?
  tail -n 1 "$log" >&2
  if ((rc != 0)); then
    go_build_log_failure "$log"
    kind_die "$name failed (full log: $log)"
  fi
}

build_kind() {
  local dir="$KIND_SRC/kind"
  go_wrapper_module "$dir" msgstore.local/kind/kind
  cd "$dir"
  go mod edit -require="sigs.k8s.io/kind@$KIND_VERSION"
  run_step go-download-kind go list -deps sigs.k8s.io/kind
  run_step go-build-kind go build -ldflags "-s -w" -o "$dir/out/kind" sigs.k8s.io/kind
  mv -f out/kind "$KIND_BIN/"
}

build_k8snode() {
  # The same wrapper as tests/integration/controlplane/build.sh.
  local dir="$KIND_SRC/k8snode"
  go_k8s_wrapper "$dir" msgstore.local/kind/k8snode
  cd "$dir"
  run_step go-download-k8snode go list -deps k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kube-proxy
  run_step go-build-k8snode go build -ldflags "$(go_k8s_ldflags)" -o "$dir/out/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy
  mv -f out/kubelet out/kubeadm out/kube-proxy "$KIND_BIN/"
}

build_containerd() {
  local dir="$KIND_SRC/containerd" v=github.com/containerd/containerd/v2/version
  local pkgs=(github.com/containerd/containerd/v2/cmd/containerd
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    github.com/containerd/containerd/v2/cmd/ctr)
  go_k8s_wrapper "$dir" msgstore.local/kind/containerd
  cd "$dir"
  go mod edit -require="github.com/containerd/containerd/v2@$CONTAINERD_VERSION"
  run_step go-download-containerd go list -deps -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" "${pkgs[@]}"
  # CGO off: no btrfs/devmapper/zfs snapshotters (overlayfs is what kind uses).
  run_step go-build-containerd go build -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
    -ldflags "-s -w -X $v.Version=$CONTAINERD_VERSION -X $v.Revision=go-module -X $v.Package=github.com/containerd/containerd/v2" \
    -o "$dir/out/" "${pkgs[@]}"
  mv -f out/containerd out/containerd-shim-runc-v2 out/ctr "$KIND_BIN/"
}

build_crictl() {
  # cri-tools declares itself sigs.k8s.io/cri-tools, which the module proxy may refuse (403)
  # while it serves github.com/kubernetes-sigs/cri-tools: require the canonical path and
  # replace it by the GitHub path (the same source tree).
  local dir="$KIND_SRC/crictl"
  go_k8s_wrapper "$dir" msgstore.local/kind/crictl
  cd "$dir"
  go mod edit -require="sigs.k8s.io/cri-tools@$CRICTL_VERSION" \
    -replace="sigs.k8s.io/cri-tools=github.com/kubernetes-sigs/cri-tools@$CRICTL_VERSION"
  run_step go-download-crictl go list -deps sigs.k8s.io/cri-tools/cmd/crictl
  run_step go-build-crictl go build -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    -o "$dir/out/crictl" sigs.k8s.io/cri-tools/cmd/crictl
  mv -f out/crictl "$KIND_BIN/"
}

build_etcd() {
  # kubeadm v1.36 runs registry.k8s.io/etcd:3.6.8-0; tests/integration/controlplane builds the same
  # version with the same wrapper technique, so this build links from the shared Go build cache.
  local dir="$KIND_SRC/etcd"
  go_wrapper_module "$dir" msgstore.local/kind/etcd
  cd "$dir"
  go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  run_step go-download-etcd go list -deps go.etcd.io/etcd/server/v3
  run_step go-build-etcd go build -ldflags "-s -w" -o "$dir/out/etcd" go.etcd.io/etcd/server/v3
  mv -f out/etcd "$KIND_BIN/"
}

build_coredns() {
  # CoreDNS with the plugins of the Corefile kubeadm writes (errors, health, ready,
  # kubernetes, prometheus, forward, cache, loop, reload, loadbalance) and a few that are
  # common edits of it (log, hosts, rewrite), the way a custom plugin.cfg builds it: a main
  # package importing those plugins instead of core/plugin, which imports all 59 and with
  # them the cloud DNS providers' SDKs, tracing and QUIC. That halves what a cold build
  # compiles (776 packages instead of 1,333).
  local dir="$KIND_SRC/coredns" p
  go_k8s_wrapper "$dir" msgstore.local/kind/coredns
  cd "$dir"
  go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION"
  {
    printf '// CoreDNS with the plugins a kubeadm cluster uses (scripts/kind/build-binaries.sh).\n'
    printf 'package main\n\nimport (\n'
    for p in $COREDNS_PLUGINS; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf '\n\t"github.com/coredns/coredns/coremain"\n)\n\nfunc main() { coremain.Run() }\n'
  } >main.go
  run_step go-download-coredns go list -deps .
  run_step go-build-coredns go build -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
    -o "$dir/out/coredns" .
  mv -f out/coredns "$KIND_BIN/"
}

build_lpp() {
  local dir="$KIND_SRC/lpp"
  go_k8s_wrapper "$dir" msgstore.local/kind/lpp
  cd "$dir"
  go mod edit -require="github.com/rancher/local-path-provisioner@$LPP_VERSION"
  run_step go-download-lpp go list -deps github.com/rancher/local-path-provisioner
  run_step go-build-lpp go build -ldflags "-s -w -X main.VERSION=$LPP_VERSION" \
    -o "$dir/out/local-path-provisioner" github.com/rancher/local-path-provisioner
  mv -f out/local-path-provisioner "$KIND_BIN/"
}

echo "building kind binaries into $KIND_BIN (logs and times in $KIND_LOGS)" >&2
TOTAL_START=$(kind_now)
for c in "${COMPONENTS[@]}"; do
  present "$c" && continue
  # k8snode compiles mostly packages the control-plane build already compiled: build that
  # first so the shared Go build cache is warm.
  if [[ "$c" == k8snode ]]; then kind_cp_bin >/dev/null; fi
  (build_"$c")
  present "$c" || kind_die "$c built but its binaries are missing from $KIND_BIN"
done
all_present || kind_die "some binaries are missing from $KIND_BIN after the build"
echo "$(date -u +%FT%TZ) total $(($(kind_now) - TOTAL_START))s (${COMPONENTS[*]})" >>"$KIND_TIMES"
echo "kind binaries built in $(($(kind_now) - TOTAL_START))s" >&2
echo "$KIND_BIN"

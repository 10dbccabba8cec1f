# Shared settings of the scripts/kind/ tooling. Source it; it defines no behaviour by itself.
#
# Versions are pinned here, in one place. kind v0.33.0 pins containerd v2.3.4 and crictl
# v1.36.0 in its base image; kubeadm v1.36 asks for etcd 3.6.8-0, CoreDNS v1.14.2 and pause
# 3.10.2 (kind's containerd config names pause 3.10 as its sandbox image). kind pins
# local-path-provisioner v0.0.34, which the Go module proxy does not serve; v0.0.30 is the
# newest it serves.

KIND_VERSION=v0.33.0
K8S_VERSION=v1.36.3
CONTAINERD_VERSION=v2.3.4
CRICTL_VERSION=v1.36.0
ETCD_VERSION=v3.6.8
ETCD_IMAGE_TAG=3.6.8-0
COREDNS_VERSION=v1.14.2
# the plugins built into CoreDNS (scripts/kind/build-binaries.sh): kubeadm's Corefile, and log,
# hosts and rewrite; "metrics" is the plugin of the Corefile's `prometheus` directive
COREDNS_PLUGINS="cache errors forward health hosts kubernetes loadbalance log loop metrics ready reload rewrite"
LPP_VERSION=v0.0.30
PAUSE_TAGS="3.10 3.10.2"
BUSYBOX_HELPER_TAG=1.35.0
# kind v0.33.0's own default node image (pkg/apis/config/defaults/image.go), for hosts with a
# registry; scripts/kind/node-image.sh assembles the local one.
KIND_PUBLISHED_NODE_IMAGE="kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
# Debian release the base images are made from (mmdebstrap)
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${MSGSTORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${MSGSTORE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

KIND_BUNDLE="kind-${KIND_VERSION}_k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_crictl-${CRICTL_VERSION}_etcd-${ETCD_VERSION}_coredns-${COREDNS_VERSION}-kubeadm_lpp-${LPP_VERSION}_k8sdeps"
KIND_CACHE_ROOT="${MSGSTORE_KIND_CACHE:-$HOME/.cache/msgstore-kind}"
KIND_ROOT="$KIND_CACHE_ROOT/$KIND_BUNDLE"
KIND_BIN="$KIND_ROOT/bin"
KIND_SRC="$KIND_ROOT/src"
KIND_LOGS="$KIND_ROOT/logs"
KIND_TIMES="$KIND_LOGS/times.txt"

KIND_TOOLS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIND_REPO_ROOT=$(cd "$KIND_TOOLS_DIR/../.." && pwd)

kind_die() {
  echo "${KIND_SCRIPT_NAME:-kind}: $*" >&2
  exit 1
}

kind_now() { date +%s; }

# kind_timed NAME CMD...: runs CMD, appends "NAME <seconds>s" to $KIND_TIMES, keeps CMD's status.
kind_timed() {
  local name=$1 start rc=0
  shift
  start=$(kind_now)
  echo "==> $name" >&2
  "$@" || rc=$?
  mkdir -p "$KIND_LOGS"
  echo "$(date -u +%FT%TZ) $name $(($(kind_now) - start))s rc=$rc" >>"$KIND_TIMES"
  echo "    $name: $(($(kind_now) - start))s (rc=$rc)" >&2
  return "$rc"
}

# True when this host's capability bounding set lacks CAP_SYS_RESOURCE (bit 24). Then no
# container can be --privileged (runc: "unable to apply caps: operation not permitted").
kind_lacks_sys_resource() {
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status 2>/dev/null) || return 1
  [[ -n "$bnd" ]] || return 1
  (((0x$bnd >> 24 & 1) == 0))
}

# The project's control-plane binaries (kubectl, kube-apiserver, ...), built when missing.
kind_cp_bin() {
  local cp_build="$KIND_REPO_ROOT/tests/integration/controlplane/build.sh" dir
  dir=$(bash "$cp_build" --print-bin-dir)
  if [[ ! -x "$dir/kubectl" || ! -x "$dir/kube-apiserver" || ! -x "$dir/kube-controller-manager" ||
    ! -x "$dir/kube-scheduler" ]]; then
    bash "$cp_build" kubernetes >&2 || kind_die "tests/integration/controlplane/build.sh kubernetes failed"
  fi
  echo "$dir"
}

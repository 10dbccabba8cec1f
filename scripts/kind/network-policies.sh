#!/usr/bin/env bash
# The NetworkPolicy enforcer of the kind cluster: kube-network-policies (the policy engine
# kindnetd embeds) built from its Go module, in an image made the way the node image's parts
# are (a Debian root filesystem from mmdebstrap, `docker import`, a classic build with
# --network none), with the DaemonSet that runs it (netpol/enforcer.yaml).
#
#   scripts/kind/network-policies.sh build        binary + image; prints the image reference last
#   scripts/kind/network-policies.sh --print-ref  the image reference only
# The caller loads the image into the cluster (kind load docker-image) and applies
# netpol/enforcer.yaml with its IMAGE placeholder replaced (tests/fixtures_kind.py,
# scripts/kind-up.sh).
#
# The engine judges the first packet of each new connection that the kernel queues to it
# (NFQUEUE). Upstream programs that diversion with an nftables `queue` rule, which needs the
# kernel's nft_queue; a kernel without it (CONFIG_NFT_QUEUE unset) refuses the rule. The
# image's entrypoint (netpol/enforcer.sh) therefore diverts the same packets with iptables'
# NFQUEUE target (xt_NFQUEUE through nft_compat), and the upstream binary runs unchanged:
# its own nftables sync fails on such a kernel, is logged, and changes nothing.
#
# Cache: the binary in $MSGSTORE_KIND_CACHE/kube-network-policies-<version>/bin (a second
# run builds nothing); the image is tagged with the version and a hash of this recipe.
set -euo pipefail
KIND_SCRIPT_NAME=network-policies
# shellcheck source=scripts/kind/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=scripts/lib/go-build.sh
source "$KIND_REPO_ROOT/scripts/lib/go-build.sh"
GO_BUILD_DIE=kind_die

# sigs.k8s.io/kube-network-policies: the module proxy serves v0.7.0 and v0.8.0.
NETPOL_VERSION=v0.8.0
NETPOL_ROOT="$KIND_CACHE_ROOT/kube-network-policies-$NETPOL_VERSION"
NETPOL_BIN="$NETPOL_ROOT/bin"
NETPOL_DIR="$KIND_TOOLS_DIR/netpol"
RECIPE_HASH=$(cd "$KIND_TOOLS_DIR" && cat network-policies.sh netpol/enforcer.sh lib.sh | sha256sum | cut -c1-10)
IMAGE="local/kube-network-policies:${NETPOL_VERSION}-${RECIPE_HASH}"

all_present() { [[ -x "$NETPOL_BIN/kube-network-policies" ]]; }

build_binary() {
  # go_build_prepare exits the script when the binary is present; run it in a subshell
  (
    KIND_LOGS="$NETPOL_ROOT/logs"
    KIND_TIMES="$KIND_LOGS/times.txt"
    go_build_prepare kube-network-policies "$NETPOL_BIN" "$NETPOL_ROOT" "$NETPOL_ROOT/src" "$KIND_LOGS"
    dir="$NETPOL_ROOT/src/wrapper"
    go_wrapper_module "$dir" msgstore.local/kind/netpol
    cd "$dir"
    go mod edit -require="sigs.k8s.io/kube-network-policies@$NETPOL_VERSION"
    for step in download build; do
      log="$KIND_LOGS/go-$step-netpol.log"
      if [[ $step == download ]]; then
        cmd=(go list -deps sigs.k8s.io/kube-network-policies/cmd)
      else
        cmd=(go build -ldflags "-s -w" -o "$dir/out/kube-network-policies" sigs.k8s.io/kube-network-policies/cmd)
      fi
      kind_timed "go-$step-netpol" nice -n "${MSGSTORE_BUILD_NICE:-0}" "${cmd[@]}" >"$log" 2>&1 || {
        go_build_log_failure "$log"
        kind_die "go $step of kube-network-policies failed (full log: $log)"
      }
    done
    mv -f out/kube-network-policies "$NETPOL_BIN/"
  ) >&2
  all_present || kind_die "kube-network-policies was built but $NETPOL_BIN/kube-network-policies is missing"
}

build_image() {
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "image $IMAGE is up to date" >&2
    return
  fi
  bash "$KIND_REPO_ROOT/scripts/docker-engine.sh" ensure >&2
  local work="$NETPOL_ROOT/work" base="msgstore-kind-build/netpol-base:$RECIPE_HASH"
  rm -rf "$work"
  mkdir -p "$work/ctx"
  # Debian essential + iptables (the nft backend: the packets go to NFQUEUE via nft_compat)
  kind_timed "netpol: mmdebstrap base" nice -n "${MSGSTORE_BUILD_NICE:-0}" mmdebstrap --quiet --variant=essential \
    --include=iptables,bash --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    "$DEBIAN_SUITE" "$work/base.tar" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" \
    "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main" >&2
  docker import "$work/base.tar" "$base" >/dev/null
  cp "$NETPOL_BIN/kube-network-policies" "$NETPOL_DIR/enforcer.sh" "$work/ctx/"
  cat >"$work/ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY kube-network-policies enforcer.sh /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/enforcer.sh"]
DOCKERFILE
  DOCKER_BUILDKIT=0 docker build --network none -q -t "$IMAGE" "$work/ctx" >/dev/null
  docker image rm "$base" >/dev/null 2>&1 || true
  rm -rf "$work"
  # images of earlier recipes: removed unless a container still uses them
  docker image ls --format '{{.Repository}}:{{.Tag}}' local/kube-network-policies | grep -vxF "$IMAGE" |
    while read -r old; do docker image rm "$old" >/dev/null 2>&1 || true; done || true
}

case "${1:-}" in
  build)
    START=$(kind_now)
    all_present || build_binary
    build_image
    echo "kube-network-policies image ready in $(($(kind_now) - START))s" >&2
    echo "$IMAGE"
    ;;
  --print-ref) echo "$IMAGE" ;;
  *) kind_die "usage: $0 build | --print-ref" ;;
esac

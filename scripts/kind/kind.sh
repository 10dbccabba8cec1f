#!/usr/bin/env bash
# Runs the pinned kind (sigs.k8s.io/kind v0.33.0, built from its Go module by
# scripts/kind/build-binaries.sh when missing) with the given arguments, e.g.
#   scripts/kind/kind.sh create cluster --name X --image "$(scripts/kind/node-image.sh | tail -1)" \
#       --config kind-config.yaml --kubeconfig F --wait 300s
#   scripts/kind/kind.sh load docker-image --name X IMAGE --nodes X-worker,X-worker2
#   scripts/kind/kind.sh delete cluster --name X
#
# On hosts whose capability bounding set lacks CAP_SYS_RESOURCE (no container can be
# --privileged there), kind runs with scripts/kind/shim/docker first on PATH, which replaces
# --privileged by everything it grants except CAP_SYS_RESOURCE. Everywhere else kind runs
# unchanged. MSGSTORE_KIND_SHIM=auto|on|off overrides the detection.
set -euo pipefail
KIND_SCRIPT_NAME=kind.sh
# shellcheck source=scripts/kind/lib.sh
source "$(dirname "$0")/lib.sh"

KIND="$KIND_BIN/kind"
if [[ ! -x "$KIND" ]]; then
  bash "$KIND_TOOLS_DIR/build-binaries.sh" kind >&2
fi

shim_dir="$KIND_TOOLS_DIR/shim"
# never find the shim itself as "the real docker" (nested calls)
clean_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$shim_dir" | paste -sd: -)
case "${MSGSTORE_KIND_SHIM:-auto}" in
  auto) if kind_lacks_sys_resource; then use_shim=1; else use_shim=0; fi ;;
  on) use_shim=1 ;;
  off) use_shim=0 ;;
  *) kind_die "MSGSTORE_KIND_SHIM must be auto, on or off (got '${MSGSTORE_KIND_SHIM}')" ;;
esac
if ((use_shim)); then
  real=$(PATH=$clean_path command -v docker) || kind_die "docker CLI not found on PATH"
  export MSGSTORE_KIND_REAL_DOCKER="$real"
  export PATH="$shim_dir:$clean_path"
else
  export PATH="$clean_path"
fi
exec "$KIND" "$@"

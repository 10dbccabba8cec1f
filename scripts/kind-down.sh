#!/usr/bin/env bash
# Deletes the kind cluster made by scripts/kind-up.sh (`make kind-down`), restores the host
# settings recorded before it was created (scripts/kind/host-settings.sh), and stops the
# container engine when kind-up started it and no container runs any more. The images stay in
# the engine; `docker rmi` them if you want the space back.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/kind/lib.sh
source scripts/kind/lib.sh

CLUSTER=${KIND_CLUSTER:-msgstore}
STATE="$KIND_CACHE_ROOT/state/$CLUSTER"
KIND=(bash scripts/kind/kind.sh)

if ! docker info >/dev/null 2>&1; then
  echo "kind-down: no container engine answers; no cluster to delete"
elif "${KIND[@]}" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  "${KIND[@]}" delete cluster --name "$CLUSTER"
else
  echo "kind-down: no kind cluster named '$CLUSTER'; nothing to delete"
fi

# kind leaves its docker network behind; remove it when kind-up created it and nothing uses it
if [[ -f "$STATE/kind-network-created" ]] && docker info >/dev/null 2>&1; then
  if docker network rm kind >/dev/null 2>&1 || ! docker network inspect kind >/dev/null 2>&1; then
    rm -f "$STATE/kind-network-created"
  else
    echo "kind-down: the docker network 'kind' is still in use; left in place"
  fi
fi

if [[ -f "$STATE/host/sysctl.txt" ]]; then
  others=""
  if docker info >/dev/null 2>&1; then
    others=$(docker ps -q --filter label=io.x-k8s.kind.cluster)
  fi
  if [[ -n "$others" ]]; then
    # their kubelets run with the values they set; restoring under them would change their host
    echo "kind-down: other kind clusters still run on this host; host settings are restored by the"
    echo "kind-down after the last of them (record kept in $STATE/host)"
  else
    bash scripts/kind/host-settings.sh restore "$STATE/host"
  fi
fi

if [[ -f "$STATE/engine-started" ]]; then
  if docker info >/dev/null 2>&1 && [[ -n "$(docker ps -q)" ]]; then
    echo "kind-down: the container engine started by kind-up still runs containers; left running"
  else
    bash scripts/docker-engine.sh stop
    rm -f "$STATE/engine-started"
  fi
fi
rmdir "$STATE" 2>/dev/null || true

#!/usr/bin/env bash
# Deletes the kind cluster made by scripts/kind-up.sh (`make kind-down`). The images stay
# in the local container engine; `docker rmi` them if you want the space back.
set -euo pipefail
CLUSTER=${KIND_CLUSTER:-msgstore}
command -v kind >/dev/null 2>&1 || { echo "kind-down: 'kind' not found" >&2; exit 1; }
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind delete cluster --name "$CLUSTER"
else
  echo "kind-down: no kind cluster named '$CLUSTER'; nothing to do"
fi

#!/usr/bin/env bash
# Smoke check of a kind cluster made with the locally assembled node image (it uses the
# busybox helper image preloaded in that image): all nodes Ready, a pod on each of two workers,
# pod-to-pod traffic across nodes, a ClusterIP Service through kube-proxy, cluster DNS through
# CoreDNS, pod egress to the host, a PersistentVolumeClaim through local-path-provisioner, and
# `kind load docker-image`.
# Everything runs in the namespace kind-smoke, which is deleted at the end.
#
# Usage: scripts/kind/smoke.sh CLUSTER KUBECONFIG
set -euo pipefail
KIND_SCRIPT_NAME=smoke
# shellcheck source=scripts/kind/lib.sh
source "$(dirname "$0")/lib.sh"
[[ $# -eq 2 ]] || kind_die "usage: $0 CLUSTER KUBECONFIG"
CLUSTER=$1
export KUBECONFIG=$2
[[ -f "$KUBECONFIG" ]] || kind_die "kubeconfig '$KUBECONFIG' not found"
KUBECTL=${KUBECTL:-$(kind_cp_bin)/kubectl}
NS=kind-smoke
HELPER="local/busybox-helper:$BUSYBOX_HELPER_TAG"
k() { "$KUBECTL" -n "$NS" "$@"; }
t() { echo "    $1: $(($(kind_now) - $2))s" >&2; }

diagnose() {
  echo "---- smoke check failed; cluster state ----" >&2
  "$KUBECTL" get nodes -o wide >&2 || true
  "$KUBECTL" get pods -A -o wide >&2 || true
  k get events --sort-by=.lastTimestamp >&2 || true
}
trap 'diagnose' ERR

start=$(kind_now)
"$KUBECTL" wait --for=condition=Ready nodes --all --timeout=300s
t "all nodes Ready" "$start"
mapfile -t WORKERS < <("$KUBECTL" get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
((${#WORKERS[@]} >= 2)) || kind_die "need two worker nodes, found: ${WORKERS[*]:-none}"

"$KUBECTL" delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
"$KUBECTL" create namespace "$NS" >/dev/null
start=$(kind_now)
k apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: a, labels: {app: a}}
spec:
  nodeName: ${WORKERS[0]}
  containers:
  - {name: c, image: $HELPER, imagePullPolicy: Never, command: [sh, -c, "mkdir -p /w && echo hello-from-a > /w/index.html && httpd -f -p 8080 -h /w"]}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec:
  nodeName: ${WORKERS[1]}
  containers:
  - {name: c, image: $HELPER, imagePullPolicy: Never, command: [sleep, "3600"]}
---
apiVersion: v1
kind: Service
metadata: {name: a}
spec:
  selector: {app: a}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: pvc}
spec:
  containers:
  - {name: c, image: $HELPER, imagePullPolicy: Never, command: [sh, -c, "echo persisted > /data/f && cat /data/f && sleep 3600"], volumeMounts: [{name: d, mountPath: /data}]}
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
YAML
k wait --for=condition=Ready pod/a pod/b --timeout=180s
t "pods on ${WORKERS[0]} and ${WORKERS[1]} Ready" "$start"
k get pods -o wide

# expect WHAT WANT CMD...: CMD's output contains WANT, within 30 s (routes to a node that has
# just joined appear within one mini-kindnet round, a few seconds)
expect() {
  local what=$1 want=$2 out="" i
  shift 2
  for i in $(seq 30); do
    out=$("$@" 2>&1) && [[ "$out" == *"$want"* ]] && { echo "ok: $what"; return 0; }
    sleep 1
  done
  echo "FAILED: $what: expected '$want' in: $out" >&2
  return 1
}
ip_a=$(k get pod a -o jsonpath='{.status.podIP}')
ip_svc=$(k get svc a -o jsonpath='{.spec.clusterIP}')
expect "pod b (${WORKERS[1]}) -> pod a (${WORKERS[0]}) at $ip_a" hello-from-a \
  k exec b -- wget -q -O- "http://$ip_a:8080/"
expect "pod b -> Service a at $ip_svc (ClusterIP, kube-proxy)" hello-from-a \
  k exec b -- wget -q -O- "http://$ip_svc/"
expect "pod b -> a.$NS.svc.cluster.local (CoreDNS)" hello-from-a \
  k exec b -- wget -q -O- "http://a.$NS.svc.cluster.local./"
# the host has no route to the pod CIDRs: an answer proves pod egress is masqueraded
gateway=$(docker exec "${WORKERS[1]}" ip -4 route show default | awk '{print $3; exit}')
expect "pod b -> the host at $gateway (egress masquerade)" "1 packets received" \
  k exec b -- ping -c 1 -W 2 "$gateway"

start=$(kind_now)
k wait --for=condition=Ready pod/pvc --timeout=180s
expect "PVC through local-path-provisioner" persisted k logs pvc
t "PVC pod Ready" "$start"
k get pvc data

had_helper=0
docker image inspect "$HELPER" >/dev/null 2>&1 && had_helper=1
# A new image for `kind load`: the helper image, exported from a node (it lives only there).
tag="local/kind-smoke-load:$$"
loaded=""
for _ in 1 2 3 4 5; do
  if docker exec "$CLUSTER-control-plane" ctr -n k8s.io images export /tmp/kind-smoke-helper.tar \
    "docker.io/$HELPER" >/dev/null 2>"${TMPDIR:-/tmp}/kind-smoke-$$.err"; then
    loaded=$(docker exec "$CLUSTER-control-plane" cat /tmp/kind-smoke-helper.tar | docker load |
      sed -n 's/^Loaded image: //p')
    docker exec "$CLUSTER-control-plane" rm -f /tmp/kind-smoke-helper.tar
    [[ -n "$loaded" ]] && break
  fi
  sleep 2
done
if [[ -z "$loaded" ]]; then
  grep -v DEPRECATION "${TMPDIR:-/tmp}/kind-smoke-$$.err" >&2 || true
  rm -f "${TMPDIR:-/tmp}/kind-smoke-$$.err"
  kind_die "could not export $HELPER from $CLUSTER-control-plane"
fi
rm -f "${TMPDIR:-/tmp}/kind-smoke-$$.err"
docker tag "$loaded" "$tag"
start=$(kind_now)
bash "$KIND_TOOLS_DIR/kind.sh" load docker-image --name "$CLUSTER" "$tag"
t "kind load docker-image" "$start"
k run loaded --image="$tag" --image-pull-policy=Never --restart=Never -- sh -c 'echo loaded-image-runs' >/dev/null
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/loaded --timeout=120s
expect "an image loaded with kind load docker-image runs" loaded-image-runs k logs loaded
docker image rm "$tag" >/dev/null
# the exported helper stays in the engine only if it was there before
[[ "$had_helper" == 1 ]] || docker image rm "$loaded" >/dev/null 2>&1 || true

trap - ERR
"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null
echo "smoke check passed on cluster '$CLUSTER'"

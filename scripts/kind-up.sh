#!/usr/bin/env bash
# msgstore on a local kind cluster (`make kind-up`), end to end:
#   1. a container engine (scripts/docker-engine.sh ensure: Debian's docker.io when missing),
#   2. a kind cluster from kind-config.yaml (one control plane, two workers), with the pinned
#      kind built from its Go module (scripts/kind/kind.sh),
#   3. the two images built (scripts/build-images.sh) and loaded into the cluster's nodes,
#   4. the NetworkPolicy enforcer (kube-network-policies built from its Go module,
#      scripts/kind/network-policies.sh) as a DaemonSet, so the store's NetworkPolicy holds,
#   5. the Helm chart installed (CRD, operator, RBAC),
#   6. the sample MessageStore of examples/ applied and waited for until Ready (its
#      NetworkPolicy admits the kind network, where NodePort traffic from the host comes from),
#   7. the Spark ingest job run on the cluster (spark-submit --deploy-mode cluster),
#   8. example queries, answered from inside the cluster.
#
# Node image (KIND_NODE_IMAGE):
#   unset      kind's published kindest/node image when it is present or can be pulled; else
#              (no registry, or a host where no container can be --privileged) the node image
#              assembled locally by scripts/kind/node-image.sh from Go modules and Debian packages
#   local      always the locally assembled image
#   published  always kind's published image
#   <ref>      that image
# kubectl and helm: $KUBECTL / $HELM when set, else the project's builds
# (tests/integration/controlplane/build.sh), else the ones on PATH, else they are built.
# Host settings a kind node changes (sysctls, /lib/modules) are recorded before the cluster is
# created and restored by `make kind-down`. Re-running it is safe: a healthy cluster is reused,
# a broken one re-created, and every later step is an upsert.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/kind/lib.sh
source scripts/kind/lib.sh

CLUSTER=${KIND_CLUSTER:-msgstore}
CONFIG=${KIND_CONFIG:-kind-config.yaml}
CONTEXT="kind-${CLUSTER}"
NAMESPACE=${MSGSTORE_NAMESPACE:-shop}
OPERATOR_NAMESPACE=${MSGSTORE_OPERATOR_NAMESPACE:-msgstore-system}
RELEASE=${MSGSTORE_RELEASE:-msgstore}
STORE=orders
TOPIC=orders
WAIT=${KIND_UP_TIMEOUT:-600s}
STATE="$KIND_CACHE_ROOT/state/$CLUSTER"
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/msgstore/Chart.yaml)
NODE_IMAGE="msgstore:${VERSION}"
SPARK_IMAGE="msgstore-spark:${VERSION}"
# 100,000 order events baked into the Spark image (storage_node/demo/sample_data.py).
SAMPLE_IN_IMAGE="file:///opt/msgstore/data/orders-sample.jsonl"

step() { printf '\n==> %s\n' "$*"; }
die() { echo "kind-up: $*" >&2; exit 1; }
[[ -f "$CONFIG" ]] || die "kind config '$CONFIG' not found"
[[ "$CLUSTER" =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "KIND_CLUSTER must be lower-case letters, digits and '-' (got '$CLUSTER')"

# tool NAME COMPONENT: the binary to use (see the header)
tool() {
  local name=$1 component=$2 cp_dir
  cp_dir=$(bash tests/integration/controlplane/build.sh --print-bin-dir)
  if [[ -x "$cp_dir/$name" ]]; then
    echo "$cp_dir/$name"
  elif command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
  else
    bash tests/integration/controlplane/build.sh "$component" >&2 || die "could not build $name"
    echo "$cp_dir/$name"
  fi
}

step "container engine"
mkdir -p "$STATE"
engine=$(bash scripts/docker-engine.sh ensure) || die "no container engine (scripts/docker-engine.sh ensure failed)"
echo "$engine"
# remember that this script started the engine, so kind-down can stop it again
[[ "$engine" == started* ]] && echo "$engine" >"$STATE/engine-started"

step "tools"
KIND=(bash scripts/kind/kind.sh)
KUBECTL=${KUBECTL:-$(tool kubectl kubernetes)}
HELM=${HELM:-$(tool helm helm)}
"${KIND[@]}" version
echo "kubectl: $KUBECTL"
echo "helm: $HELM"
kc() { "$KUBECTL" --context "$CONTEXT" "$@"; }

step "node image"
case "${KIND_NODE_IMAGE:-}" in
  "")
    if docker image inspect "$KIND_PUBLISHED_NODE_IMAGE" >/dev/null 2>&1; then
      KIND_IMAGE=$KIND_PUBLISHED_NODE_IMAGE
    elif kind_lacks_sys_resource; then
      echo "this host's capability bounding set lacks CAP_SYS_RESOURCE: using the locally assembled node image"
      KIND_IMAGE=local
    elif docker pull "$KIND_PUBLISHED_NODE_IMAGE"; then
      KIND_IMAGE=$KIND_PUBLISHED_NODE_IMAGE
    else
      echo "kind's published node image cannot be pulled: using the locally assembled node image"
      KIND_IMAGE=local
    fi
    ;;
  local) KIND_IMAGE=local ;;
  published) KIND_IMAGE=$KIND_PUBLISHED_NODE_IMAGE ;;
  *) KIND_IMAGE=$KIND_NODE_IMAGE ;;
esac
if [[ "$KIND_IMAGE" == local ]]; then
  KIND_IMAGE=$(bash scripts/kind/node-image.sh | tail -n 1)
fi
echo "node image: $KIND_IMAGE"

step "cluster '${CLUSTER}'"
if "${KIND[@]}" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  # node containers stopped (host restart, an interrupted run) are started again first
  stopped=$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --filter status=exited --filter status=created)
  if [[ -n "$stopped" ]]; then
    echo "starting stopped node containers of '${CLUSTER}'"
    # shellcheck disable=SC2086 # one argument per container id
    docker start $stopped >/dev/null || true
  fi
  "${KIND[@]}" export kubeconfig --name "$CLUSTER"
  if kc wait --for=condition=Ready nodes --all --timeout=120s; then
    echo "reusing the existing kind cluster '${CLUSTER}'"
  else
    echo "the existing cluster '${CLUSTER}' is not healthy: re-creating it"
    "${KIND[@]}" delete cluster --name "$CLUSTER"
  fi
fi
if ! "${KIND[@]}" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  # Keep the first record across re-runs: after a half-failed run the host may already differ.
  if [[ ! -f "$STATE/host/sysctl.txt" ]]; then
    bash scripts/kind/host-settings.sh save "$STATE/host"
  fi
  if ! docker network inspect kind >/dev/null 2>&1; then
    touch "$STATE/kind-network-created"
  fi
  "${KIND[@]}" create cluster --name "$CLUSTER" --image "$KIND_IMAGE" --config "$CONFIG" --wait 300s
fi
kc wait --for=condition=Ready nodes --all --timeout=300s
kc get nodes -o wide

step "images ${NODE_IMAGE} and ${SPARK_IMAGE}"
bash scripts/build-images.sh
"${KIND[@]}" load docker-image --name "$CLUSTER" "$NODE_IMAGE" "$SPARK_IMAGE"

step "NetworkPolicy enforcer (kube-network-policies)"
NETPOL_IMAGE=$(bash scripts/kind/network-policies.sh build | tail -n 1)
"${KIND[@]}" load docker-image --name "$CLUSTER" "$NETPOL_IMAGE"
sed "s|image: IMAGE|image: ${NETPOL_IMAGE}|" scripts/kind/netpol/enforcer.yaml | kc apply -f -
kc -n kube-system rollout status daemonset/kube-network-policies --timeout=300s

step "Helm chart (release '${RELEASE}' in namespace '${OPERATOR_NAMESPACE}')"
# Helm installs the CRDs only on first install; apply them so a re-run also upgrades them.
kc apply --server-side -f crds/messagestore.yaml -f crds/messagestoreuser.yaml
"$HELM" upgrade --install "$RELEASE" helm/msgstore \
  --kube-context "$CONTEXT" \
  --namespace "$OPERATOR_NAMESPACE" --create-namespace \
  --set image.tag="$VERSION" \
  --set spark.image.tag="$VERSION" \
  --wait --timeout "$WAIT"

step "sample MessageStore '${STORE}' in namespace '${NAMESPACE}'"
kc create namespace "$NAMESPACE" --dry-run=client -o yaml | kc apply -f -
# The host's NodePort traffic reaches the pods from addresses of the kind network (its
# gateway, the nodes): admit those, as a NetworkPolicy must for any NodePort (docs/SECURITY.md).
KIND_SUBNET=$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' | tr ' ' '\n' | grep -v : | head -n 1)
[[ -n "$KIND_SUBNET" ]] || die "no IPv4 subnet on the docker network 'kind'"
kc -n "$NAMESPACE" apply -f examples/messagestore.yaml
kc -n "$NAMESPACE" patch messagestore "$STORE" --type merge \
  -p "{\"spec\":{\"networkPolicy\":{\"ingressFrom\":[{\"ipBlock\":{\"cidr\":\"${KIND_SUBNET}\"}}]}}}"
kc -n "$NAMESPACE" apply -f examples/client-nodeport.yaml
kc -n "$NAMESPACE" wait --for=condition=Ready "messagestore/${STORE}" --timeout="$WAIT"
kc -n "$NAMESPACE" get messagestore "$STORE"

step "Spark ingest of ${SAMPLE_IN_IMAGE} into topic '${TOPIC}' (cluster mode)"
JOB=$(docker run --rm --network none "$NODE_IMAGE" msgstore spark-job ingest \
  --store "$STORE" -n "$NAMESPACE" --topic "$TOPIC" \
  --input "$SAMPLE_IN_IMAGE" --format jsonl \
  --key-field order_id --tag-field event_type --time-field ts \
  --image "$SPARK_IMAGE" --executors 2 --executor-memory 1g -o yaml)
JOB_NAME=$(printf '%s\n' "$JOB" | sed -n 's/^  name: //p' | head -n 1)
kc -n "$NAMESPACE" delete job "$JOB_NAME" --ignore-not-found
printf '%s\n' "$JOB" | kc apply -f -
if ! kc -n "$NAMESPACE" wait --for=condition=Complete "job/${JOB_NAME}" --timeout="$WAIT"; then
  kc -n "$NAMESPACE" logs "job/${JOB_NAME}" --tail=100 || true
  die "the Spark ingest job did not complete; see the log above"
fi

step "example queries (run inside the cluster, where every node is reachable)"
TOKEN=$(kc -n "$NAMESPACE" get secret "${STORE}-token" -o jsonpath='{.data.token}' | base64 -d)
ENDPOINT="http://${STORE}.${NAMESPACE}.svc.cluster.local:8080"
client() {
  kc -n "$NAMESPACE" run "msgstore-client-$RANDOM" --rm -i --quiet --restart=Never \
    --image "$NODE_IMAGE" --image-pull-policy IfNotPresent \
    --env "MSGSTORE_ENDPOINT=${ENDPOINT}" --env "MSGSTORE_TOKEN=${TOKEN}" \
    --command -- msgstore "$@"
}
echo "--- msgstore topic describe ${TOPIC}"
client topic describe "$TOPIC"
echo "--- msgstore consume ${TOPIC} --partition 0 --offset 0 --max 3"
client consume "$TOPIC" --partition 0 --offset 0 --max 3
echo "--- msgstore query ${TOPIC} ord-00000042   (the order's events, newest first)"
client query "$TOPIC" ord-00000042 --max 10

cat <<EOF

msgstore is running on kind cluster '${CLUSTER}'.
  ${KUBECTL} --context ${CONTEXT} -n ${NAMESPACE} get messagestores,pods,svc
  ${KUBECTL} --context ${CONTEXT} -n ${OPERATOR_NAMESPACE} logs deploy/${RELEASE}-operator
From this machine (NodePort 30080 on 127.0.0.1; partitions owned by other nodes answer 421):
  curl -s -H "Authorization: Bearer \$(${KUBECTL} --context ${CONTEXT} -n ${NAMESPACE} get secret ${STORE}-token -o jsonpath='{.data.token}' | base64 -d)" http://127.0.0.1:30080/v1/cluster
Inside the cluster, any msgstore command works against ${ENDPOINT}, e.g.:
  ${KUBECTL} --context ${CONTEXT} -n ${NAMESPACE} run c --rm -it --restart=Never --image ${NODE_IMAGE} \\
    --env MSGSTORE_ENDPOINT=${ENDPOINT} --env MSGSTORE_TOKEN=... --command -- msgstore get <message-id>
Delete everything with: make kind-down
EOF

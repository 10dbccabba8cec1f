#!/usr/bin/env bash
# msgstore on a local kind cluster (`make kind-up`), end to end:
#   1. a kind cluster from kind-config.yaml (one control plane, two workers),
#   2. the two images built (scripts/build-images.sh) and loaded into the cluster's nodes,
#   3. the Helm chart installed (CRD, operator, RBAC),
#   4. the sample MessageStore of examples/ applied and waited for until Ready,
#   5. the Spark ingest job run on the cluster (spark-submit --deploy-mode cluster),
#   6. example queries, answered from inside the cluster.
# Needs docker (with a running engine), kind, kubectl and helm on PATH. Re-running it is safe:
# every step is an upsert. `make kind-down` deletes the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-msgstore}
CONTEXT="kind-${CLUSTER}"
NAMESPACE=${MSGSTORE_NAMESPACE:-shop}
OPERATOR_NAMESPACE=${MSGSTORE_OPERATOR_NAMESPACE:-msgstore-system}
RELEASE=${MSGSTORE_RELEASE:-msgstore}
STORE=orders
TOPIC=orders
WAIT=${KIND_UP_TIMEOUT:-600s}
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/msgstore/Chart.yaml)
NODE_IMAGE="msgstore:${VERSION}"
SPARK_IMAGE="msgstore-spark:${VERSION}"
# 100,000 order events baked into the Spark image (storage_node/sample_data.py).
SAMPLE_IN_IMAGE="file:///opt/msgstore/data/orders-sample.jsonl"

step() { printf '\n==> %s\n' "$*"; }
die() { echo "kind-up: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH: $2"; }
kc() { kubectl --context "$CONTEXT" "$@"; }

need docker "install Docker (or set up a docker-compatible engine)"
need kind "install kind: https://kind.sigs.k8s.io/"
need kubectl "install kubectl"
need helm "install helm v3"
docker info >/dev/null 2>&1 || die "the docker client cannot reach a container engine ('docker info' failed)"

step "cluster '${CLUSTER}'"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing the existing kind cluster '${CLUSTER}'"
else
  kind create cluster --name "$CLUSTER" --config kind-config.yaml --wait 180s
fi

step "images ${NODE_IMAGE} and ${SPARK_IMAGE}"
bash scripts/build-images.sh
kind load docker-image --name "$CLUSTER" "$NODE_IMAGE" "$SPARK_IMAGE"

step "Helm chart (release '${RELEASE}' in namespace '${OPERATOR_NAMESPACE}')"
# Helm installs the CRD only on first install; apply it so a re-run also upgrades it.
kc apply --server-side -f crds/messagestore.yaml
helm upgrade --install "$RELEASE" helm/msgstore \
  --kube-context "$CONTEXT" \
  --namespace "$OPERATOR_NAMESPACE" --create-namespace \
  --set image.tag="$VERSION" \
  --set spark.image.tag="$VERSION" \
  --wait --timeout "$WAIT"

step "sample MessageStore '${STORE}' in namespace '${NAMESPACE}'"
kc create namespace "$NAMESPACE" --dry-run=client -o yaml | kc apply -f -
kc -n "$NAMESPACE" apply -f examples/messagestore.yaml
kc -n "$NAMESPACE" apply -f examples/client-nodeport.yaml
kc -n "$NAMESPACE" wait --for=condition=Ready "messagestore/${STORE}" --timeout="$WAIT"
kc -n "$NAMESPACE" get messagestore "$STORE"

step "Spark ingest of ${SAMPLE_IN_IMAGE} into topic '${TOPIC}' (cluster mode)"
JOB=$(docker run --rm "$NODE_IMAGE" msgstore spark-job ingest \
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
  kubectl --context ${CONTEXT} -n ${NAMESPACE} get messagestores,pods,svc
  kubectl --context ${CONTEXT} -n ${OPERATOR_NAMESPACE} logs deploy/${RELEASE}-operator
From this machine (NodePort 30080 on 127.0.0.1; partitions owned by other nodes answer 421):
  curl -s -H "Authorization: Bearer \$(kubectl --context ${CONTEXT} -n ${NAMESPACE} get secret ${STORE}-token -o jsonpath='{.data.token}' | base64 -d)" http://127.0.0.1:30080/v1/cluster
Inside the cluster, any msgstore command works against ${ENDPOINT}, e.g.:
  kubectl --context ${CONTEXT} -n ${NAMESPACE} run c --rm -it --restart=Never --image ${NODE_IMAGE} \\
    --env MSGSTORE_ENDPOINT=${ENDPOINT} --env MSGSTORE_TOKEN=... --command -- msgstore get <message-id>
Delete everything with: make kind-down
EOF

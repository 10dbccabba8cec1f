#!/usr/bin/env bash
# `make test`: lint, then every test once, in three pytest processes side by side
# (docs/TESTING.md#make-test):
#   cluster  -m "kind or e2e or images": the kind cluster's tests and the image tests (which
#            build the same images). Mostly waits on builds, pods and the cluster's own
#            processes. One kind cluster with fixed host ports per machine, so it holds
#            $MSGSTORE_KIND_LOCK (flock) while it runs.
#   clients  -m "kafka or console or cli": the front ends' tests against node processes:
#            Kafka's clients, the console's browser, the msgstore command line and its local
#            clusters; mostly waits on JVMs, Chromium and nodes. Started once the lint and the
#            Maven jars are done.
#   rest     every other test, on this terminal, started with the clients.
# The cluster process starts first, so its builds (Docker engine, kind node image, images)
# overlap the lint and the other tests; Kafka's jars and Spark's Kafka source (Maven) are
# fetched during the lint. The two background processes write to files, printed whole at the
# end; each process also writes a JUnit XML file (per-test durations) beside them.
# The exit status is 0 only when the lint and every process passed.
#
# Usage: scripts/test.sh [PYTEST_ARGS...]   (extra arguments go to every pytest process)
#   PY                     the Python of the virtualenv (default: .venv/bin/python)
#   MSGSTORE_TEST_OUT      where the background processes' output, the JUnit files and build
#                          logs go (default: $TMPDIR/msgstore-test)
#   MSGSTORE_KIND_LOCK     the lock of the machine's kind cluster (default: $TMPDIR/msgstore-kind.lock)
#   MSGSTORE_BUILD_NICE    one niceness for every build (default: 0 for the cluster process's, 10
#                          for the others')
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
PY=${PY:-.venv/bin/python}
TMP=${TMPDIR:-/tmp}
OUT=${MSGSTORE_TEST_OUT:-$TMP/msgstore-test}
LOCK=${MSGSTORE_KIND_LOCK:-$TMP/msgstore-kind.lock}
# Builds a process starts run at this niceness (MSGSTORE_BUILD_NICE, scripts/lib/go-build.sh).
# The cluster process's builds (control plane, kind's binaries, node image, enforcer) are
# what its tests wait for on a cold machine, the longest path of the run; the other
# processes' builds (Prometheus, kwok and etcd of the control plane) yield to the tests.
CLUSTER_NICE=${MSGSTORE_BUILD_NICE:-0}
OTHER_NICE=${MSGSTORE_BUILD_NICE:-10}
CLUSTER_TESTS="kind or e2e or images"
CLIENT_TESTS="kafka or console or cli"
mkdir -p "$OUT"
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }

# flock -o: the lock stays with flock itself, not with the daemons the tests start.
if ! flock -n "$LOCK" true; then
  echo "[test] another kind run holds $LOCK: the cluster tests wait for it" >&2
fi
MSGSTORE_BUILD_NICE=$CLUSTER_NICE MSGSTORE_TEST_BUILD_LOG="$OUT/builds-cluster.log" flock -o "$LOCK" \
  "$PY" -m pytest -q -rs -p no:cacheprovider --durations=15 --junitxml="$OUT/cluster.xml" \
  -m "$CLUSTER_TESTS" "$@" >"$OUT/cluster.log" 2>&1 &
cluster_pid=$!
echo "[test] cluster tests (-m '$CLUSTER_TESTS') started in a second pytest process;" \
  "follow them with: tail -f $OUT/cluster.log" >&2

{ bash scripts/kafka-jars.sh && bash scripts/spark-kafka-jars.sh; } >"$OUT/kafka-jars.log" 2>&1 &
jars_pid=$!

lint=0
"$PY" -m ruff check . || lint=1
"$PY" -m ruff format --check . || lint=1
"$PY" -m mypy || lint=1
echo "[test] lint done after $(elapsed)" >&2
if ! wait "$jars_pid"; then
  echo "[test] scripts/kafka-jars.sh or spark-kafka-jars.sh failed (the Java client tests say why):" >&2
  tail -n 20 "$OUT/kafka-jars.log" >&2
fi

MSGSTORE_BUILD_NICE=$OTHER_NICE MSGSTORE_TEST_BUILD_LOG="$OUT/builds-clients.log" \
  "$PY" -m pytest -q -rs -p no:cacheprovider --durations=15 --junitxml="$OUT/clients.xml" \
  -m "($CLIENT_TESTS) and not ($CLUSTER_TESTS)" "$@" >"$OUT/clients.log" 2>&1 &
clients_pid=$!
echo "[test] Kafka client, console and command-line tests (-m '$CLIENT_TESTS') started in a third" \
  "pytest process; follow them with: tail -f $OUT/clients.log" >&2

MSGSTORE_BUILD_NICE=$OTHER_NICE MSGSTORE_TEST_BUILD_LOG="$OUT/builds-rest.log" \
  "$PY" -m pytest -q -rs -p no:cacheprovider --durations=25 --junitxml="$OUT/rest.xml" \
  -m "not ($CLUSTER_TESTS or $CLIENT_TESTS)" "$@"
rest=$?
((rest == 5)) && rest=0 # no test selected (arguments that name only other processes' tests)
echo "[test] other tests done after $(elapsed) (exit $rest); waiting for the others" >&2
wait "$clients_pid"
clients=$?
((clients == 5)) && clients=0
echo "[test] client tests done after $(elapsed) (exit $clients)" >&2
wait "$cluster_pid"
cluster=$?
((cluster == 5)) && cluster=0

echo
echo "==== client tests (-m '$CLIENT_TESTS', third pytest process): $OUT/clients.log ===="
cat "$OUT/clients.log"
echo
echo "==== cluster tests (-m '$CLUSTER_TESTS', second pytest process): $OUT/cluster.log ===="
cat "$OUT/cluster.log"
echo "==== make test: lint $([[ $lint == 0 ]] && echo passed || echo FAILED)," \
  "other tests exit $rest, client tests exit $clients, cluster tests exit $cluster;" \
  "$(elapsed) in all ===="
[[ $lint == 0 && $rest == 0 && $clients == 0 && $cluster == 0 ]]

#!/bin/bash
# Entrypoint of the msgstore Spark image (docker/spark.Dockerfile).
#
# Spark on Kubernetes starts its pods with the image's entrypoint and the role as the first
# argument, and passes everything else in environment variables it sets in the pod:
#   driver ARGS...  the driver pod of a cluster-mode submit: spark-submit in client mode, bound
#                   to the pod's address. Needs SPARK_DRIVER_BIND_ADDRESS (the pod IP).
#   executor        an executor pod: Spark's KubernetesExecutorBackend in a JVM. Needs
#                   SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES,
#                   SPARK_EXECUTOR_MEMORY, SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP; uses
#                   SPARK_RESOURCE_PROFILE_ID (default 0), SPARK_EXECUTOR_POD_NAME (default
#                   the hostname), SPARK_JAVA_OPT_0, _1, ... (JVM options, in that order),
#                   SPARK_EXECUTOR_LIBRARY_PATH, SPARK_CONF_DIR, HADOOP_CONF_DIR,
#                   SPARK_EXTRA_CLASSPATH, SPARK_DIST_CLASSPATH.
#   anything else   run as given (spark-submit, python3 job.py, java -version, bash, ...).
# A missing required variable is an error naming it (exit 64), before anything starts.
# The roles run under tini, which reaps the Python workers and forwards signals.
set -euo pipefail

die() {
  echo "spark-entrypoint: $*" >&2
  exit 64
}

: "${SPARK_HOME:?SPARK_HOME must be set (the image sets /opt/spark)}"
: "${JAVA_HOME:?JAVA_HOME must be set (the image sets /opt/java/openjdk)}"

require() { # require ROLE VAR...: every VAR is set and not empty
  local role=$1 missing=() var
  shift
  for var in "$@"; do
    [[ -n "${!var:-}" ]] || missing+=("$var")
  done
  ((${#missing[@]} == 0)) ||
    die "the '$role' role needs environment variables that Spark on Kubernetes sets in the pods it creates; missing: ${missing[*]}"
}

# A uid without a passwd entry (a cluster that picks the uid, e.g. OpenShift's restricted
# SCC) breaks Hadoop's user lookup; nss_wrapper gives it one without writing /etc/passwd.
fake_passwd_entry() {
  local uid gid wrapper dir
  uid=$(id -u)
  gid=$(id -g)
  getent passwd "$uid" >/dev/null 2>&1 && return 0
  for wrapper in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
    [[ -s "$wrapper" ]] || continue
    dir=$(mktemp -d 2>/dev/null) || {
      echo "spark-entrypoint: uid $uid has no passwd entry and no temporary directory is writable" >&2
      return 0
    }
    printf 'spark:x:%s:%s:%s:%s:/bin/false\n' "$uid" "$gid" "${SPARK_USER_NAME:-anonymous uid}" \
      "$SPARK_HOME" >"$dir/passwd"
    printf 'spark:x:%s:\n' "$gid" >"$dir/group"
    export LD_PRELOAD="$wrapper" NSS_WRAPPER_PASSWD="$dir/passwd" NSS_WRAPPER_GROUP="$dir/group"
    return 0
  done
  echo "spark-entrypoint: uid $uid has no passwd entry and nss_wrapper is not installed" >&2
}

classpath() {
  local cp="${SPARK_CONF_DIR:-$SPARK_HOME/conf}"
  [[ -n "${HADOOP_CONF_DIR:-}" ]] && cp="$cp:$HADOOP_CONF_DIR"
  cp="$cp:$SPARK_HOME/jars/*"
  [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]] && cp="$cp:$SPARK_EXTRA_CLASSPATH"
  [[ -n "${SPARK_DIST_CLASSPATH:-}" ]] && cp="$cp:$SPARK_DIST_CLASSPATH"
  # The working directory too (files Spark ships to executors land there; SPARK-43540).
  printf '%s:%s' "$cp" "$PWD"
}

role=${1:-}
case "$role" in
  driver)
    shift
    require driver SPARK_DRIVER_BIND_ADDRESS
    cmd=("$SPARK_HOME/bin/spark-submit"
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS"
      --deploy-mode client
      "$@")
    ;;
  executor)
    shift
    require executor SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES \
      SPARK_EXECUTOR_MEMORY SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP
    # SPARK_JAVA_OPT_<n> in numeric order (a plain sort would put _10 before _2).
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -v SPARK_JAVA_OPT_ | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4,4n || true)
    if [[ -n "${SPARK_EXECUTOR_LIBRARY_PATH:-}" ]]; then
      export LD_LIBRARY_PATH="$SPARK_EXECUTOR_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    cmd=("$JAVA_HOME/bin/java"
      "${java_opts[@]}"
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY"
      -cp "$(classpath)"
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
      --driver-url "$SPARK_DRIVER_URL"
      --executor-id "$SPARK_EXECUTOR_ID"
      --cores "$SPARK_EXECUTOR_CORES"
      --app-id "$SPARK_APPLICATION_ID"
      --hostname "$SPARK_EXECUTOR_POD_IP"
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}"
      --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}")
    ;;
  "")
    die "usage: driver ARGS... | executor | COMMAND [ARGS...]"
    ;;
  *)
    cmd=("$@")
    ;;
esac

fake_passwd_entry
# PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON come from the image (or the pod) and are exported.
export PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON
if [[ "$role" == driver || "$role" == executor ]]; then
  echo "spark-entrypoint: $role: ${cmd[*]}" >&2
fi
# -s: also reap as a subreaper when this is not PID 1 (e.g. under `docker run --init`).
exec /usr/bin/tini -s -- "${cmd[@]}"

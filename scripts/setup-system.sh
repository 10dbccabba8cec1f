#!/usr/bin/env bash
# Installs the system packages msgstore needs on a fresh Debian machine: Java 17 for Spark and
# Apache Kafka's tools (fetched by Maven), with its compiler (javac) for the Spark JVM reader's
# jar (spark/msgstore_spark/jvm_reader.py).
# The Kubernetes test control plane (etcd included) is built from Go sources by
# tests/integration/controlplane/build.sh, which needs a Go toolchain (checked here so a missing one is
# reported up front). Idempotent; does nothing when everything is present.
set -euo pipefail
need=()
if ! java -version 2>&1 | grep -q 'version "17' || ! javac -version 2>&1 | grep -q '^javac 17'; then
  need+=(openjdk-17-jdk-headless)
fi
# maven: fetches Apache Kafka's jars (scripts/kafka-jars.sh) for the Java client tests and
# bench/kafka.py.
if ! command -v mvn >/dev/null 2>&1; then need+=(maven); fi
if ! command -v python3.11 >/dev/null 2>&1; then need+=(python3.11 python3.11-venv); fi
# a C compiler and Python's headers: pip builds the Kafka listener's record codec (Cython,
# setup.py) when it installs msgstore
if ! command -v gcc >/dev/null 2>&1; then need+=(gcc); fi
if ! { command -v python3.11 >/dev/null 2>&1 && python3.11 -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }; then
  need+=(python3.11-dev)
fi
# ip and iptables: the replication tests put each node in its own network namespace.
if ! command -v ip >/dev/null 2>&1; then need+=(iproute2); fi
if ! command -v iptables >/dev/null 2>&1; then need+=(iptables); fi
# kcat: the Kafka listener's tests drive it as a real Kafka client (tests/integration/kafka).
if ! command -v kcat >/dev/null 2>&1; then need+=(kcat); fi
# chromium and chromium-driver: the web console's browser tests (tests/integration/console).
if ! command -v chromium >/dev/null 2>&1; then need+=(chromium); fi
if ! command -v chromedriver >/dev/null 2>&1; then need+=(chromium-driver); fi
if ((${#need[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing Debian packages: ${need[*]}"
  # wait for another package manager run (an unattended upgrade, a parallel setup) to end
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v go >/dev/null 2>&1; then
  echo "warning: no Go toolchain on PATH: the Kubernetes end-to-end tests cannot build their control plane" >&2
fi

#!/usr/bin/env bash
# Installs the system packages msgstore needs on a fresh Debian machine:
# Java 17 for Spark and etcd for the test control plane. Idempotent; does nothing when present.
set -euo pipefail
need=()
if ! java -version 2>&1 | grep -q 'version "17'; then need+=(openjdk-17-jre-headless); fi
if ! command -v etcd >/dev/null 2>&1; then need+=(etcd-server); fi
if ((${#need[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

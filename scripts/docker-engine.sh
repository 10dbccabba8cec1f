#!/usr/bin/env bash
# A Docker engine for building images and running kind, on a fresh Debian machine too.
#
#   scripts/docker-engine.sh ensure   install Debian's docker.io (and the image tools) when
#                                     missing, start dockerd when no engine answers; prints
#                                     "started PID" when this call started it, else "running"
#   scripts/docker-engine.sh stop     stops the dockerd this script started (by its PID file)
#   scripts/docker-engine.sh status   exit 0 when an engine answers
#
# Machines with systemd running get the packaged service; machines without (containers, CI
# sandboxes) get dockerd as a background process whose PID is kept in $STATE/dockerd.pid, so
# `stop` ends exactly the process that `ensure` started.
set -euo pipefail

STATE=${MSGSTORE_DOCKER_STATE:-$HOME/.cache/msgstore-docker}
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log
# Debian packages the image and cluster scripts use: the engine, mmdebstrap for base images,
# busybox for helper images, jq for kind's base files, gcc/libc6-dev for the static pause binary.
PACKAGES=(docker.io mmdebstrap busybox-static jq gcc libc6-dev uidmap)

die() {
  echo "docker-engine: $*" >&2
  exit 1
}

answers() { docker info >/dev/null 2>&1; }

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  local sudo=""
  [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
  echo "docker-engine: installing Debian packages: ${missing[*]}" >&2
  # wait for another package manager run (an unattended upgrade, a parallel setup) to end
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

start() {
  mkdir -p "$STATE"
  if [[ -d /run/systemd/system ]] && systemctl start docker.service 2>/dev/null; then
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || die "dockerd not found after installing docker.io"
  # Debian's containerd is started by dockerd itself when no system containerd runs.
  nohup dockerd --pidfile "$STATE/dockerd.engine.pid" >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
}

case "${1:-ensure}" in
  ensure)
    install_packages
    if answers; then
      echo "running"
      exit 0
    fi
    start
    for _ in $(seq 60); do
      if answers; then
        if [[ -f "$PIDFILE" ]]; then echo "started $(cat "$PIDFILE")"; else echo "started"; fi
        exit 0
      fi
      sleep 1
    done
    tail -n 30 "$LOG" >&2 2>/dev/null || true
    die "dockerd did not answer within 60 s (log: $LOG)"
    ;;
  stop)
    [[ -f "$PIDFILE" ]] || {
      echo "docker-engine: no dockerd started by this script" >&2
      exit 0
    }
    pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$PIDFILE"
    ;;
  status) answers ;;
  *) die "usage: $0 ensure|stop|status" ;;
esac

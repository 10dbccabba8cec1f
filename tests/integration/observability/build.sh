#!/usr/bin/env bash
# Builds Prometheus and promtool from the Prometheus Go module, fetched only through the Go
# module proxy (no prebuilt binary), into a cache kept per version outside the repository, the
# way tests/integration/controlplane/build.sh builds the test control plane. A second run is a
# no-op.
#
# The binaries are built with the `remove_all_sd` and `enable_kubernetes_sd` tags: no cloud
# service discovery is compiled in, only Kubernetes' (the Prometheus pod on kind discovers the
# node pods by their annotations; the loopback tests scrape static targets; file and HTTP
# discovery remain). The web UI's
# assets are not embedded (the HTTP API, which the tests use, does not need them).
#
# Usage: tests/integration/observability/build.sh [--print-bin-dir]
#   MSGSTORE_PROM_CACHE  cache root (default: $HOME/.cache/msgstore-prometheus)
# The last line printed is the directory holding `prometheus` and `promtool`.
set -euo pipefail
# shellcheck source=scripts/lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib/go-build.sh"
GO_BUILD_DIE=die

# Prometheus 3.16.0 is published to the module proxy as v0.316.0.
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_RELEASE=3.16.0
BUILD_TAGS="remove_all_sd enable_kubernetes_sd"

BUNDLE="prometheus-${PROMETHEUS_VERSION}_${BUILD_TAGS// /-}"
CACHE_ROOT="${MSGSTORE_PROM_CACHE:-$HOME/.cache/msgstore-prometheus}"
ROOT="$CACHE_ROOT/$BUNDLE"
BIN="$ROOT/bin"
SRC="$ROOT/src"
LOGS="$ROOT/logs"

die() {
  echo "prometheus build FAILED: $*" >&2
  exit 1
}

all_present() {
  [[ -x "$BIN/prometheus" && -x "$BIN/promtool" ]]
}

if [[ "${1:-}" == "--print-bin-dir" ]]; then
  echo "$BIN"
  exit 0
fi

go_build_prepare prometheus "$BIN" "$ROOT" "$SRC" "$LOGS"

now() { date +%s; }
start=$(now)
dir="$SRC/prometheus"
go_wrapper_module "$dir" msgstore.test/observability/prometheus
cd "$dir"
go mod edit -require="github.com/prometheus/prometheus@$PROMETHEUS_VERSION"
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$PROMETHEUS_RELEASE"
ldflags+=" -X $v.Revision=go-module -X $v.Branch=go-module -X $v.BuildDate=19700101-00:00:00"
echo "building prometheus and promtool $PROMETHEUS_VERSION into $BIN (logs in $LOGS)" >&2
if ! nice -n "${MSGSTORE_BUILD_NICE:-0}" go build -tags "$BUILD_TAGS" -ldflags "$ldflags" -o "$dir/out/" \
  github.com/prometheus/prometheus/cmd/prometheus \
  github.com/prometheus/prometheus/cmd/promtool >"$LOGS/build.log" 2>&1; then
  go_build_log_failure "$LOGS/build.log"
  die "prometheus did not build (full log: $LOGS/build.log)"
fi
mv -f out/prometheus out/promtool "$BIN/"
all_present || die "the binaries are missing from $BIN after the build"
echo "$(date -u +%FT%TZ) prometheus+promtool $(($(now) - start))s" | tee -a "$LOGS/build-times.txt" >&2
echo "$BIN"

#!/usr/bin/env bash
# Builds the two msgstore images with a local container engine (`make images`):
#   msgstore:<version>        storage node + operator   (docker/Dockerfile)
#   msgstore-spark:<version>  Spark jobs                (docker/spark.Dockerfile)
# <version> is the chart's appVersion. Set DOCKER to another docker-compatible client
# (e.g. podman) and IMAGE_PREFIX to push to a registry (e.g. registry.example/team/).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-docker}
IMAGE_PREFIX=${IMAGE_PREFIX:-}
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/msgstore/Chart.yaml)
[[ -n "$VERSION" ]] || { echo "build-images: no appVersion in helm/msgstore/Chart.yaml" >&2; exit 1; }

if ! command -v "$DOCKER" >/dev/null 2>&1; then
  echo "build-images: '$DOCKER' not found; building images needs a container engine (Docker, Podman)" >&2
  exit 1
fi
if ! "$DOCKER" info >/dev/null 2>&1; then
  echo "build-images: '$DOCKER info' failed: no container engine is reachable from this machine" >&2
  exit 1
fi

build() {
  local dockerfile=$1 image=$2
  echo "==> building $image from $dockerfile"
  "$DOCKER" build -f "$dockerfile" -t "$image" .
}

build docker/Dockerfile "${IMAGE_PREFIX}msgstore:${VERSION}"
build docker/spark.Dockerfile "${IMAGE_PREFIX}msgstore-spark:${VERSION}"
echo "built ${IMAGE_PREFIX}msgstore:${VERSION} and ${IMAGE_PREFIX}msgstore-spark:${VERSION}"

#!/usr/bin/env bash
# Builds msgstore's two container images on this machine, without any container registry
# (`make images`):
#   msgstore:<appVersion>        storage node + operator   (docker/Dockerfile)
#   msgstore-spark:<appVersion>  Spark driver and executors (docker/spark.Dockerfile)
# <appVersion> comes from helm/msgstore/Chart.yaml.
#
#   scripts/build-images.sh [node|spark|all]     (default: all; works from any directory)
#   scripts/build-images.sh kcat                 msgstore-kcat:<appVersion>: Debian's kcat on
#                                                a minimal base (the Kafka client the kind
#                                                tests run in a pod); not part of all
#
# Progress goes to stderr; the LAST line on stdout is the image reference(s) built,
# separated by a space (node first), for callers such as scripts/kind-up.sh.
#
# What goes in, where it is cached, and what a change invalidates:
#   1. Base images: Debian bookworm root filesystems made with mmdebstrap from the Debian
#      mirror and `docker import`ed as msgstore-base:<flavour>-bookworm-<recipe hash>
#      (recipe = the complete mmdebstrap argument list; see base_args). A base with that tag
#      is reused as is. A changed recipe makes a new base, which invalidates every layer of
#      the image built on it.
#   2. Wheelhouse: the pins of pyproject.toml (dependencies + build backend) as wheels, made
#      on this machine by pip into $CACHE/wheels/<hash of the pins and of the host Python's
#      tags>. pyspark is published as an sdist only; its wheel is built here once. A changed
#      pin makes a new wheelhouse and invalidates the dependency-install layer and all after.
#   3. The msgstore wheel, built from the source tree (pyproject.toml, README.md,
#      storage_node/, operator/, spark/) into $CACHE/msgstore-wheel/<hash of those files>.
#      A source change re-runs only the msgstore install layer and the layers after it.
#   4. Dockerfiles, the Spark entrypoint and the jobs: docker's layer cache, from the first
#      changed instruction on.
# Each image is built with the classic builder (DOCKER_BUILDKIT=0) from a context staged in
# $CACHE/context/<image> (hard links into the caches), with --network none: every file comes
# from the context and nothing is downloaded during the build. Nothing changed = every layer
# cached, a few seconds.
#
# Environment:
#   DOCKER                  docker-compatible client (default: docker; the engine is started
#                           with scripts/docker-engine.sh when DOCKER is docker)
#   IMAGE_PREFIX            prefix of the image names, e.g. registry.example/team/ (default: none)
#   PYTHON_IMAGE            base of the node image instead of the local Debian base, e.g.
#                           python:3.11-slim-bookworm (needs a registry; builds get the network)
#   SPARK_BASE_IMAGE        the same for the Spark image, e.g. python:3.11-slim-bookworm
#   MSGSTORE_IMAGES_CACHE   cache directory (default: $HOME/.cache/msgstore-images)
#   DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR   apt sources of the local bases
#   HOST_PYTHON             a Python 3.11 to build the wheelhouse with (default: python3.11)
#   MSGSTORE_IMAGES_REBUILD=1   make the bases again with mmdebstrap (today's Debian updates)
#                           and build the images with --no-cache (the wheelhouse stays; use a
#                           new MSGSTORE_IMAGES_CACHE for a new one)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

die() {
  echo "build-images: $*" >&2
  exit 1
}
log() { printf '[build-images] %s\n' "$*" >&2; }

WHAT=${1:-all}
case "$WHAT" in
  node | spark | all | kcat) ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 0
    ;;
  *) die "unknown target '$WHAT' (expected node, spark, all or kcat)" ;;
esac
(($# <= 1)) || die "expected at most one argument (node, spark or all), got: $*"

DOCKER=${DOCKER:-docker}
export DOCKER_BUILDKIT=0
IMAGE_PREFIX=${IMAGE_PREFIX:-}
CACHE=${MSGSTORE_IMAGES_CACHE:-$HOME/.cache/msgstore-images}
SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
HOST_PYTHON=${HOST_PYTHON:-python3.11}
REBUILD=${MSGSTORE_IMAGES_REBUILD:-0}
PIP_VERSION=25.3 # the pip of the host-side tool venv (same pin as the Makefile's)
# The optional parts of pyproject.toml ([project.optional-dependencies]) each image carries
# on top of the core dependencies: the node image runs the node and the operator (and can
# tier to S3), the Spark image runs PySpark. The Dockerfiles install msgstore with the same.
NODE_EXTRAS="operator s3"
SPARK_EXTRAS="spark"

VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' helm/msgstore/Chart.yaml)
[[ -n "$VERSION" ]] || die "no appVersion in helm/msgstore/Chart.yaml"
NODE_REF="${IMAGE_PREFIX}msgstore:${VERSION}"
SPARK_REF="${IMAGE_PREFIX}msgstore-spark:${VERSION}"

# --- timing ------------------------------------------------------------------------------
TIMES=()
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
timed() { # timed LABEL CMD...: runs CMD, records and logs its wall time
  local label=$1 t0
  shift
  t0=$(now)
  "$@"
  TIMES+=("$(printf '%-44s %7ss' "$label" "$(since "$t0")")")
  log "$label: $(since "$t0") s"
}
T_START=$(now)

# --- engine, lock ------------------------------------------------------------------------
if [[ "$DOCKER" == docker ]]; then
  bash "$REPO/scripts/docker-engine.sh" ensure >&2 || die "no Docker engine (scripts/docker-engine.sh ensure failed)"
fi
command -v "$DOCKER" >/dev/null 2>&1 || die "'$DOCKER' not found: building images needs a container engine"
"$DOCKER" info >/dev/null 2>&1 || die "'$DOCKER info' failed: no container engine answers"

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/.lock; waiting for it"
  flock 9
fi

image_exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }
image_id() { "$DOCKER" image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
drop_replaced() { # drop_replaced OLD_ID REF: remove the image REF pointed at before, if unused
  local old=$1 ref=$2
  if [[ -n "$old" && "$old" != "$(image_id "$ref")" ]]; then
    "$DOCKER" rmi "$old" >/dev/null 2>&1 || true
  fi
}
image_mb() { "$DOCKER" image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }

# --- 1. local Debian bases ---------------------------------------------------------------
# The packages of each base; python3.11 is bookworm's Python (requires-python is 3.11).
# Spark's adds openjdk-17-jre-headless for the JVM, procps (Spark's scripts call ps), bash for
# the entrypoint, libnss-wrapper so a uid without a passwd entry gets one (Hadoop needs a name).
declare -A BASE_PACKAGES=(
  [python]="python3.11 python3-venv ca-certificates tini"
  [spark]="python3.11 python3-venv ca-certificates tini openjdk-17-jre-headless procps bash libnss-wrapper"
  [kcat]="kcat ca-certificates"
)

# shellcheck disable=SC2016 # the hook's $1 (the root directory) is mmdebstrap's to expand
base_args() { # base_args FLAVOUR: the mmdebstrap arguments before the output path
  local pkgs=${BASE_PACKAGES[$1]}
  BASE_ARGS=(
    --variant=minbase
    --include="${pkgs// /,}"
    --aptopt='Acquire::Retries "3"'
    # No manuals, docs (copyright files are kept) or translations in the image.
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    # openjdk's postinst registers java.1.gz with update-alternatives, which fails when the
    # man1 directory is missing (excluded above): create it, as slim Java images do.
    --essential-hook='mkdir -p "$1/usr/share/man/man1"'
    "$SUITE"
  )
}
base_sources() {
  printf '%s\n' "deb $DEBIAN_MIRROR $SUITE main" "deb $DEBIAN_MIRROR $SUITE-updates main" \
    "deb $DEBIAN_SECURITY_MIRROR $SUITE-security main"
}

ensure_base() { # ensure_base FLAVOUR: sets BASE_REF to msgstore-base:<flavour>-bookworm-<hash>
  local flavour=$1 hash tar old
  base_args "$flavour"
  hash=$({
    printf '%s\n' "${BASE_ARGS[@]}"
    base_sources
  } | sha256sum | cut -c1-12)
  BASE_REF="msgstore-base:${flavour}-${SUITE}-${hash}"
  if image_exists "$BASE_REF" && [[ "$REBUILD" != 1 ]]; then
    log "base $BASE_REF exists ($(image_mb "$BASE_REF")); not rebuilt"
  else
    command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap not found (apt-get install mmdebstrap)"
    mkdir -p "$CACHE/rootfs"
    tar="$CACHE/rootfs/${flavour}-${hash}.tar"
    rm -f "$tar"
    old=$(image_id "$BASE_REF")
    local sources=()
    mapfile -t sources < <(base_sources)
    log "base $BASE_REF: mmdebstrap $SUITE with ${BASE_ARGS[1]#--include=}"
    timed "mmdebstrap $flavour base" mmdebstrap --quiet "${BASE_ARGS[@]}" "$tar" "${sources[@]}" >&2
    timed "docker import $flavour base" "$DOCKER" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change "LABEL org.msgstore.base-recipe=${hash}" \
      --change 'CMD ["/bin/bash"]' \
      "$tar" "$BASE_REF" >&2
    rm -f "$tar"
    drop_replaced "$old" "$BASE_REF"
    log "base $BASE_REF: $(image_mb "$BASE_REF")"
  fi
  # The Dockerfiles' default base (a moving tag); builds name the exact one.
  "$DOCKER" tag "$BASE_REF" "msgstore-base:${flavour}-${SUITE}"
}

# --- 2. wheelhouse -----------------------------------------------------------------------
ensure_tool_venv() {
  command -v "$HOST_PYTHON" >/dev/null 2>&1 ||
    die "'$HOST_PYTHON' not found: the wheelhouse is built with Python 3.11 (set HOST_PYTHON)"
  "$HOST_PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
    die "$HOST_PYTHON is $("$HOST_PYTHON" -V 2>&1), not Python 3.11 (set HOST_PYTHON)"
  TOOL_VENV="$CACHE/tools/venv-$("$HOST_PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
  if [[ ! -x "$TOOL_VENV/bin/pip" ]] || ! "$TOOL_VENV/bin/pip" --version | grep -q "^pip $PIP_VERSION "; then
    log "tool venv $TOOL_VENV (pip $PIP_VERSION)"
    rm -rf "$TOOL_VENV"
    "$HOST_PYTHON" -m venv "$TOOL_VENV"
    "$TOOL_VENV/bin/python" -m pip install -q "pip==$PIP_VERSION" >&2
  fi
}

ensure_wheelhouse() { # sets WHEELS and writes $WHEELS/{node,spark}.{txt,files}
  ensure_tool_venv
  local py="$TOOL_VENV/bin/python" reqs hash tmp
  # The pins: the core dependencies and the images' extras, then the build backend (to build
  # the msgstore wheel offline). `pins SECTION...` prints the pins of pyproject.toml's
  # sections: "core" (the dependencies), "build" (the build backend) or an extra's name.
  pins() {
    "$py" - "$REPO/pyproject.toml" "$@" <<'EOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as fh:
    data = tomllib.load(fh)
for section in sys.argv[2:]:
    if section == "core":
        reqs = data["project"]["dependencies"]
    elif section == "build":
        reqs = data["build-system"]["requires"]
    else:
        reqs = data["project"]["optional-dependencies"][section]
    for req in reqs:
        print(req)
EOF
  }
  # shellcheck disable=SC2086 # the extras are word lists
  reqs=$(pins core $NODE_EXTRAS $SPARK_EXTRAS build)
  hash=$({
    echo "$reqs"
    "$py" -c 'import platform, sys, sysconfig; print(sys.implementation.cache_tag, sysconfig.get_platform(), platform.libc_ver())'
  } | sha256sum | cut -c1-16)
  WHEELS="$CACHE/wheels/$hash"
  if [[ -f "$WHEELS/.complete" ]]; then
    log "wheelhouse $WHEELS exists ($(du -sh "$WHEELS" | cut -f1)); not rebuilt"
    return 0
  fi
  mkdir -p "$CACHE/wheels"
  tmp=$(mktemp -d "$CACHE/wheels/.tmp-$hash-XXXXXX")
  echo "$reqs" >"$tmp/all.txt"
  # shellcheck disable=SC2086 # the extras are word lists
  pins core $NODE_EXTRAS >"$tmp/node.txt"
  # shellcheck disable=SC2086 # the extras are word lists
  pins core $SPARK_EXTRAS >"$tmp/spark.txt"
  log "wheelhouse $WHEELS: pip wheel of $(wc -l <"$tmp/all.txt") pins and their dependencies"
  # PIP_FIND_LINKS/PIP_NO_INDEX of the calling environment must not change what is fetched.
  timed "wheelhouse (pip wheel)" env -u PIP_FIND_LINKS -u PIP_NO_INDEX \
    "$TOOL_VENV/bin/pip" wheel -q --wheel-dir "$tmp" -r "$tmp/all.txt" >&2
  # Which wheels each image installs: pip's own resolution, offline, from the wheelhouse.
  local image
  for image in node spark; do
    env -u PIP_FIND_LINKS "$TOOL_VENV/bin/pip" install -q --dry-run --ignore-installed \
      --no-index --find-links "$tmp" --report "$tmp/$image.report.json" -r "$tmp/$image.txt" >&2
    "$py" - "$tmp/$image.report.json" >"$tmp/$image.files" <<'EOF'
import json
import sys
from urllib.parse import unquote, urlparse

report = json.load(open(sys.argv[1]))
for item in report["install"]:
    print(unquote(urlparse(item["download_info"]["url"]).path).rsplit("/", 1)[-1])
EOF
    rm -f "$tmp/$image.report.json"
  done
  grep -qi '^pyspark-' "$tmp/node.files" && die "the node image's wheels would include pyspark"
  touch "$tmp/.complete"
  rm -rf "$WHEELS"
  mv "$tmp" "$WHEELS"
  log "wheelhouse $WHEELS: $(du -sh "$WHEELS" | cut -f1)"
}

# --- 3. the msgstore wheel ---------------------------------------------------------------
SOURCE_PATHS=(pyproject.toml setup.py README.md storage_node operator spark)
source_files() {
  find "${SOURCE_PATHS[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
    ! -path '*.egg-info/*' ! -name '*.so' ! -name 'record_codec.c' ! -name 'read_kernel.c' -print0 | LC_ALL=C sort -z
}
ensure_msgstore_wheel() { # sets APP_WHEEL
  local hash dir tmp
  hash=$(source_files | xargs -0 sha256sum | sha256sum | cut -c1-16)
  dir="$CACHE/msgstore-wheel/$hash"
  if ! compgen -G "$dir/msgstore-*.whl" >/dev/null; then
    mkdir -p "$CACHE/msgstore-wheel"
    tmp=$(mktemp -d "$CACHE/msgstore-wheel/.tmp-XXXXXX")
    mkdir "$tmp/src" "$tmp/out"
    source_files | tar -c --null -T - -f - | tar -x -C "$tmp/src"
    timed "msgstore wheel (from the source tree)" env -u PIP_FIND_LINKS \
      "$TOOL_VENV/bin/pip" wheel -q --no-deps --no-index --find-links "$WHEELS" \
      --wheel-dir "$tmp/out" "$tmp/src" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    mv "$tmp"/out/msgstore-*.whl "$dir/"
    rm -rf "$tmp"
    # Wheels of other source trees, built more than a day ago, go.
    find "$CACHE/msgstore-wheel" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -mmin +1440 \
      -exec rm -rf {} +
  else
    log "msgstore wheel of this source tree exists ($hash)"
  fi
  APP_WHEEL=$(compgen -G "$dir/msgstore-*.whl" | head -n 1)
}

# --- 4. images ---------------------------------------------------------------------------
link_into() { # link_into DIR FILE...: hard links (a copy across file systems)
  local dir=$1 f
  shift
  mkdir -p "$dir"
  for f in "$@"; do ln "$f" "$dir/" 2>/dev/null || cp -p "$f" "$dir/"; done
}

reader_jar() { # the Spark JVM reader's jar, built by the project's venv (make venv)
  local py=${MSGSTORE_PYTHON:-.venv/bin/python} jar
  [[ -x "$py" ]] || die "no $py to build the Spark JVM reader's jar with: run 'make venv' first"
  jar=$("$py" -c 'from msgstore_spark.jvm_reader import jar_path; print(jar_path() or "")')
  [[ -n "$jar" ]] || die "javac is missing for the Spark JVM reader's jar: run scripts/setup-system.sh"
  echo "$jar"
}

stage_context() { # stage_context IMAGE: sets CTX
  local image=$1 files
  CTX="$CACHE/context/$image"
  rm -rf "$CTX"
  mkdir -p "$CTX/wheels" "$CTX/msgstore"
  mapfile -t files < <(sed "s|^|$WHEELS/|" "$WHEELS/$image.files")
  link_into "$CTX/wheels" "${files[@]}"
  cp "$WHEELS/$image.txt" "$CTX/requirements.txt"
  link_into "$CTX/msgstore" "$APP_WHEEL"
  if [[ "$image" == node ]]; then
    cp docker/Dockerfile "$CTX/Dockerfile"
  else
    cp docker/spark.Dockerfile "$CTX/Dockerfile"
    cp docker/spark-entrypoint.sh "$CTX/entrypoint.sh"
    mkdir -p "$CTX/jobs" "$CTX/jars"
    cp spark/jobs/*.py "$CTX/jobs/"
    # The JVM reader's jar (msgstore_spark.load), compiled here against the same pyspark
    # pin: the image has a Java runtime, not javac.
    cp "$(reader_jar)" "$CTX/jars/"
  fi
}

build_image() { # build_image IMAGE REF BASE_ARG BASE_REF LOCAL(yes|no)
  local image=$1 ref=$2 base_arg=$3 base_ref=$4 local_base=$5 opts=() old
  stage_context "$image"
  old=$(image_id "$ref")
  # Local bases need nothing from outside; a public base may apt-get what it lacks.
  [[ "$local_base" == yes ]] && opts+=(--network none)
  [[ "$REBUILD" == 1 ]] && opts+=(--no-cache)
  log "image $ref on $base_ref (context $(du -shL "$CTX" | cut -f1))"
  timed "docker build $image image" "$DOCKER" build "${opts[@]}" \
    --build-arg "$base_arg=$base_ref" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.msgstore.wheelhouse=$(basename "$WHEELS")" \
    --label "org.msgstore.source=$(basename "$(dirname "$APP_WHEEL")")" \
    -t "$ref" -f "$CTX/Dockerfile" "$CTX" >&2
  # The image this tag named before (and its layers no other image uses) goes.
  drop_replaced "$old" "$ref"
  log "image $ref: $(image_mb "$ref")"
}

if [[ "$WHAT" == kcat ]]; then # the base is the whole image: no Python, no wheels
  ensure_base kcat
  "$DOCKER" tag "$BASE_REF" "${IMAGE_PREFIX}msgstore-kcat:${VERSION}"
  log "image ${IMAGE_PREFIX}msgstore-kcat:${VERSION}: $(image_mb "$BASE_REF") in $(since "$T_START") s"
  echo "${IMAGE_PREFIX}msgstore-kcat:${VERSION}"
  exit 0
fi

BUILT=()
SIZES=()
if [[ "$WHAT" == node || "$WHAT" == all ]]; then
  if [[ -n "${PYTHON_IMAGE:-}" ]]; then NODE_BASE=$PYTHON_IMAGE NODE_LOCAL=no; else
    ensure_base python
    NODE_BASE=$BASE_REF NODE_LOCAL=yes
  fi
fi
if [[ "$WHAT" == spark || "$WHAT" == all ]]; then
  if [[ -n "${SPARK_BASE_IMAGE:-}" ]]; then SPARK_BASE=$SPARK_BASE_IMAGE SPARK_LOCAL=no; else
    ensure_base spark
    SPARK_BASE=$BASE_REF SPARK_LOCAL=yes
  fi
fi
ensure_wheelhouse
ensure_msgstore_wheel
if [[ "$WHAT" == node || "$WHAT" == all ]]; then
  build_image node "$NODE_REF" PYTHON_IMAGE "$NODE_BASE" "$NODE_LOCAL"
  BUILT+=("$NODE_REF")
  SIZES+=("$(printf '%-44s %s' "$NODE_BASE" "$(image_mb "$NODE_BASE")")"
    "$(printf '%-44s %s' "$NODE_REF" "$(image_mb "$NODE_REF")")")
fi
if [[ "$WHAT" == spark || "$WHAT" == all ]]; then
  build_image spark "$SPARK_REF" SPARK_BASE_IMAGE "$SPARK_BASE" "$SPARK_LOCAL"
  BUILT+=("$SPARK_REF")
  SIZES+=("$(printf '%-44s %s' "$SPARK_BASE" "$(image_mb "$SPARK_BASE")")"
    "$(printf '%-44s %s' "$SPARK_REF" "$(image_mb "$SPARK_REF")")")
fi

TIMES+=("$(printf '%-44s %7ss' "total" "$(since "$T_START")")")
{
  echo "---- sizes (docker image inspect .Size)"
  printf '  %s\n' "${SIZES[@]}"
  echo "---- times (wall clock)"
  printf '  %s\n' "${TIMES[@]}"
} >&2
{
  echo "# $(date -u +%FT%TZ) $WHAT $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo -)"
  printf '  %s\n' "${SIZES[@]}" "${TIMES[@]}"
} >>"$CACHE/build-times.log"
echo "${BUILT[*]}"

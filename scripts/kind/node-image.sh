#!/usr/bin/env bash
# Assembles a kind node image with no container registry, from Debian packages (mmdebstrap)
# and the binaries of scripts/kind/build-binaries.sh and tests/integration/controlplane/build.sh:
#   1. base image: Debian bookworm (systemd, runc, CNI plugins, iptables, ...) + kind's own base
#      files from the sigs.k8s.io/kind module + containerd/ctr/shim/crictl; entrypoint patched
#      (node/patch-entrypoint.py) so a node also boots without --privileged;
#   2. component images: kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
#      etcd, CoreDNS, pause (gcc -static of the Kubernetes module's pause.c), mini-kindnet as the
#      CNI (kindnetd is not obtainable from the module proxy), local-path-provisioner and a
#      busybox helper (Debian busybox-static);
#   3. node image: what `kind build node-image` does (docker run, cp, ctr import, commit) minus
#      its `ctr content fetch`, which always goes to the registries.
# Image builds and the assembly run with --network none; only mmdebstrap reaches the Debian mirror.
#
# Usage: scripts/kind/node-image.sh [--print-ref]
# The image is tagged with the Kubernetes version and a short hash of the recipe (this script,
# lib.sh and node/*); when that tag exists the script returns at once. The LAST line printed is
# the image reference. Intermediate tars and component images are removed after success.
set -euo pipefail
KIND_SCRIPT_NAME=node-image
# shellcheck source=scripts/kind/lib.sh
source "$(dirname "$0")/lib.sh"

RECIPE_HASH=$(cd "$KIND_TOOLS_DIR" && cat lib.sh node-image.sh node/* | sha256sum | cut -c1-10)
NODE_IMAGE="local/msgstore-kind-node:${K8S_VERSION}-${RECIPE_HASH}"
BASE_IMAGE="msgstore-kind-build/base:${RECIPE_HASH}"
# Build-time names in the engine; inside the node they are re-tagged to the names kubeadm and
# the manifests use (so nothing of the same name in the engine is overwritten or removed).
B=msgstore-kind-build
IMAGE_MAP=(
  "$B/kube-apiserver:$K8S_VERSION registry.k8s.io/kube-apiserver:$K8S_VERSION"
  "$B/kube-controller-manager:$K8S_VERSION registry.k8s.io/kube-controller-manager:$K8S_VERSION"
  "$B/kube-scheduler:$K8S_VERSION registry.k8s.io/kube-scheduler:$K8S_VERSION"
  "$B/kube-proxy:$K8S_VERSION registry.k8s.io/kube-proxy:$K8S_VERSION"
  "$B/etcd:$ETCD_IMAGE_TAG registry.k8s.io/etcd:$ETCD_IMAGE_TAG"
  "$B/coredns:$COREDNS_VERSION registry.k8s.io/coredns/coredns:$COREDNS_VERSION"
  "$B/pause:3.10 registry.k8s.io/pause:3.10"
  "$B/pause:3.10.2 registry.k8s.io/pause:3.10.2"
  "$B/mini-kindnet:v1 local/mini-kindnet:v1"
  "$B/local-path-provisioner:$LPP_VERSION local/local-path-provisioner:$LPP_VERSION"
  "$B/busybox-helper:$BUSYBOX_HELPER_TAG local/busybox-helper:$BUSYBOX_HELPER_TAG"
)
HELPER_IMAGES=("$B/debian-net:$DEBIAN_SUITE" "$B/static-base:1")

if [[ "${1:-}" == "--print-ref" ]]; then
  echo "$NODE_IMAGE"
  exit 0
fi
[[ $# -eq 0 ]] || kind_die "usage: $0 [--print-ref]"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if docker info >/dev/null 2>&1 && have_image "$NODE_IMAGE"; then
  echo "node image $NODE_IMAGE is up to date" >&2
  echo "$NODE_IMAGE"
  exit 0
fi

# Engine and Debian tools (mmdebstrap, busybox-static, gcc, jq), installed/started when missing.
bash "$KIND_REPO_ROOT/scripts/docker-engine.sh" ensure >&2
mkdir -p "$KIND_CACHE_ROOT"
exec 8>"$KIND_CACHE_ROOT/.node-image.lock"
flock 8
if have_image "$NODE_IMAGE"; then
  echo "$NODE_IMAGE"
  exit 0
fi

START=$(kind_now)
BIN=$(bash "$KIND_TOOLS_DIR/build-binaries.sh" | tail -n 1)
CP_BIN=$(kind_cp_bin)
# module_dir MODULE@VERSION: its source directory in the module cache (fetched when missing)
module_dir() {
  (cd / && GOFLAGS= GOTOOLCHAIN=local go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
}
KINDMOD=$(module_dir "sigs.k8s.io/kind@$KIND_VERSION")
KMOD=$(module_dir "k8s.io/kubernetes@$K8S_VERSION")
[[ -d "$KINDMOD/images/base/files" ]] || kind_die "kind module source missing: $KINDMOD"
[[ -f "$KMOD/build/pause/linux/pause.c" ]] || kind_die "Kubernetes module source missing: $KMOD"
for b in "$BIN"/{kind,kubelet,kubeadm,kube-proxy,containerd,containerd-shim-runc-v2,ctr,crictl,etcd,coredns,local-path-provisioner} \
  "$CP_BIN"/{kubectl,kube-apiserver,kube-controller-manager,kube-scheduler}; do
  [[ -x "$b" ]] || kind_die "missing binary $b"
done
BUSYBOX=/bin/busybox # Debian's busybox-static (installed by scripts/docker-engine.sh)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" && [[ -x "$BUSYBOX" ]] ||
  kind_die "busybox-static is not installed (apt-get install busybox-static)"

WORK="$KIND_CACHE_ROOT/work"
rm -rf "$WORK"
mkdir -p "$WORK"
BUILD_CTR="msgstore-kind-build-$$"
cleanup() { # also after a failure: the build container and the temporary files (up to ~1 GB)
  docker rm -f -v "$BUILD_CTR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
export DOCKER_BUILDKIT=0 # the classic builder: no buildx needed, FROM resolves local images

DEBIAN_SOURCES=(
  "deb $DEBIAN_MIRROR $DEBIAN_SUITE main"
  "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main"
  "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main"
)
MMDEBSTRAP_OPTS=(
  --aptopt='APT::Install-Recommends "false"'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
)

# ---- 1. base image (kind v0.33.0 images/base/Dockerfile, from Debian packages) ------------------
# Not included (not needed for a plain kind cluster on overlayfs): nfs-common, open-iscsi,
# fuse-overlayfs, containerd-fuse-overlayfs, curl. Debian supplies runc and the CNI plugins.
"$BIN/ctr" oci spec |
  jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$WORK/cri-base.json"
cat >"$WORK/base-customize.sh" <<'HOOK'
#!/bin/bash
set -euo pipefail
R=$1
F=$KINDMOD/images/base/files
install -m 0755 "$F"/usr/local/bin/* "$R/usr/local/bin/"
mkdir -p "$R/kind/bin"
install -m 0644 "$F/kind/README.txt" "$R/kind/"
install -m 0755 "$F"/kind/bin/* "$R/kind/bin/"
chmod 755 "$R/kind" "$R/kind/bin"
install -m 0644 "$F/etc/crictl.yaml" "$R/etc/"
mkdir -p "$R/etc/containerd" "$R/etc/systemd/system/kubelet.service.d" "$R/etc/kubernetes/manifests"
install -m 0644 "$F/etc/containerd/config.toml" "$R/etc/containerd/"
install -m 0644 "$F/etc/default/kubelet" "$R/etc/default/"
install -m 0644 "$F"/etc/sysctl.d/* "$R/etc/sysctl.d/"
install -m 0644 "$F"/etc/systemd/system/*.service "$F"/etc/systemd/system/*.slice "$R/etc/systemd/system/"
install -m 0644 "$F"/etc/systemd/system/kubelet.service.d/* "$R/etc/systemd/system/kubelet.service.d/"
# as kind's Dockerfile: trim systemd units
find "$R/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
rm -f "$R"/lib/systemd/system/multi-user.target.wants/* "$R"/etc/systemd/system/*.wants/* \
  "$R"/lib/systemd/system/local-fs.target.wants/* "$R"/lib/systemd/system/sockets.target.wants/*udev* \
  "$R"/lib/systemd/system/sockets.target.wants/*initctl* "$R"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$R/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$R/sbin/init"
chroot "$R" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
chroot "$R" systemctl mask systemd-binfmt.service
install -m 0755 "$BIN/containerd" "$BIN/containerd-shim-runc-v2" "$BIN/ctr" "$BIN/crictl" "$R/usr/local/bin/"
install -m 0644 "$WORK/cri-base.json" "$R/etc/containerd/cri-base.json"
# CNI plugins from Debian's containernetworking-plugins, where containerd expects them
mkdir -p "$R/opt/cni/bin"
for p in host-local loopback ptp portmap bridge; do cp -a "$R/usr/lib/cni/$p" "$R/opt/cni/bin/"; done
# kubelet >= 1.35 refuses cgroup v1 hosts unless failCgroupV1 is false; the flag overrides the
# kubeadm-generated config, so the node also runs on cgroup v1 hosts (no effect on cgroup v2).
sed -i '1s|$| --fail-cgroupv1=false|' "$R/etc/default/kubelet"
echo >>"$R/etc/default/kubelet"
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin
python3 "$PATCH_ENTRYPOINT" "$R/usr/local/bin/entrypoint"
HOOK
chmod +x "$WORK/base-customize.sh"
export KINDMOD BIN WORK PATCH_ENTRYPOINT="$KIND_TOOLS_DIR/node/patch-entrypoint.py"

BASE_PKGS=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,e2fsprogs,runc,containernetworking-plugins
kind_timed "node-image: mmdebstrap base" nice -n "${MSGSTORE_BUILD_NICE:-0}" mmdebstrap --quiet --variant=minbase \
  --include="$BASE_PKGS" "${MMDEBSTRAP_OPTS[@]}" \
  --customize-hook="$WORK/base-customize.sh \"\$1\"" \
  "$DEBIAN_SUITE" "$WORK/base-rootfs.tar" "${DEBIAN_SOURCES[@]}"
kind_timed "node-image: docker import base" docker import \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  "$WORK/base-rootfs.tar" "$BASE_IMAGE" >/dev/null
rm -f "$WORK/base-rootfs.tar"

# ---- 2. component images ------------------------------------------------------------------------
components() {
  local ctx="$WORK/ctx"
  mkdir -p "$ctx"
  # debian-net: Debian essential + the network tools kube-proxy and mini-kindnet call
  nice -n "${MSGSTORE_BUILD_NICE:-0}" mmdebstrap --quiet --variant=essential --include=iptables,nftables,conntrack,iproute2,procps \
    "${MMDEBSTRAP_OPTS[@]}" "$DEBIAN_SUITE" "$WORK/debian-net.tar" "${DEBIAN_SOURCES[@]}"
  docker import "$WORK/debian-net.tar" "$B/debian-net:$DEBIAN_SUITE" >/dev/null
  rm -f "$WORK/debian-net.tar"

  # static-base: what distroless/static gives a Go binary (passwd, group, /tmp, CA bundle)
  local sb="$ctx/static-base"
  mkdir -p "$sb/etc/ssl/certs" "$sb/tmp" "$sb/usr/local/bin"
  chmod 1777 "$sb/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$sb/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$sb/etc/group"
  printf 'hosts: files dns\n' >"$sb/etc/nsswitch.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$sb/etc/ssl/certs/"
  tar -C "$sb" --owner=0 --group=0 -c . |
    docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$B/static-base:1" >/dev/null

  # pause, from the Kubernetes module's own source
  local p="$ctx/pause"
  mkdir -p "$p"
  gcc -Os -Wall -Werror -static -DVERSION=v3.10.2-msgstore -o "$p/pause" "$KMOD/build/pause/linux/pause.c"
  strip "$p/pause"
  tar -C "$p" --owner=0 --group=0 -c pause |
    docker import --change 'USER 65535:65535' --change 'ENTRYPOINT ["/pause"]' - "$B/pause:3.10.2" >/dev/null
  docker tag "$B/pause:3.10.2" "$B/pause:3.10"

  # busybox helper: local-path helper pods need sh, mkdir, rm; handy as a test image too
  local bb="$ctx/busybox"
  mkdir -p "$bb/bin" "$bb/tmp" "$bb/etc"
  chmod 1777 "$bb/tmp"
  cp "$BUSYBOX" "$bb/bin/busybox"
  local a
  for a in $("$bb/bin/busybox" --list); do [[ "$a" == busybox ]] || ln -sf busybox "$bb/bin/$a"; done
  cp "$sb/etc/passwd" "$sb/etc/group" "$bb/etc/"
  tar -C "$bb" --owner=0 --group=0 -c . |
    docker import --change 'ENV PATH=/bin' --change 'CMD ["sh"]' - "$B/busybox-helper:$BUSYBOX_HELPER_TAG" >/dev/null

  # image TAG BASE FILE... -- DOCKERFILE-LINE...: classic build, no network
  image() {
    local tag=$1 base=$2 dir
    shift 2
    dir="$ctx/$(echo "$tag" | tr '/:' '__')"
    mkdir -p "$dir"
    while [[ $# -gt 0 && "$1" != -- ]]; do cp "$1" "$dir/"; shift; done
    shift
    { echo "FROM $base"; printf '%s\n' "$@"; } >"$dir/Dockerfile"
    docker build --network none -q -t "$tag" "$dir" >/dev/null 2>"$dir/build.err" || {
      cat "$dir/build.err" >&2
      return 1
    }
  }
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    image "$B/$c:$K8S_VERSION" "$B/static-base:1" "$CP_BIN/$c" -- "COPY $c /usr/local/bin/$c"
  done
  image "$B/kube-proxy:$K8S_VERSION" "$B/debian-net:$DEBIAN_SUITE" "$BIN/kube-proxy" -- \
    "COPY kube-proxy /usr/local/bin/kube-proxy"
  image "$B/etcd:$ETCD_IMAGE_TAG" "$B/static-base:1" "$BIN/etcd" -- "COPY etcd /usr/local/bin/etcd"
  image "$B/coredns:$COREDNS_VERSION" "$B/static-base:1" "$BIN/coredns" -- \
    "COPY coredns /coredns" 'ENTRYPOINT ["/coredns"]'
  image "$B/local-path-provisioner:$LPP_VERSION" "$B/static-base:1" "$BIN/local-path-provisioner" -- \
    "COPY local-path-provisioner /usr/local/bin/local-path-provisioner" \
    'ENTRYPOINT ["/usr/local/bin/local-path-provisioner"]'
  image "$B/mini-kindnet:v1" "$B/debian-net:$DEBIAN_SUITE" "$CP_BIN/kubectl" "$KIND_TOOLS_DIR/node/mini-kindnet.sh" -- \
    "COPY kubectl mini-kindnet.sh /usr/local/bin/"

  local refs=() m
  for m in "${IMAGE_MAP[@]}"; do refs+=("${m%% *}"); done
  docker save "${refs[@]}" >"$WORK/images.tar"
  rm -rf "$ctx"
}
kind_timed "node-image: component images" components

# ---- 3. node image ------------------------------------------------------------------------------
# kind's default storage manifest (local-path-provisioner), with the locally built image names
python3 - "$KINDMOD/pkg/build/nodeimage/const_storage.go" "$WORK/default-storage.yaml" \
  "local/local-path-provisioner:$LPP_VERSION" "local/busybox-helper:$BUSYBOX_HELPER_TAG" <<'PY'
import sys

src = open(sys.argv[1]).read()
body = src.split("const defaultStorageManifest = `", 1)[1].rsplit("`", 1)[0]
body = body.replace("` + storageProvisionerImage + `", sys.argv[3])
body = body.replace("` + storageHelperImage + `", sys.argv[4])
if "`" in body:
    sys.exit("kind's storage manifest changed: unexpected Go string concatenation left")
open(sys.argv[2], "w").write(body)
PY

# in_node CMD...: runs CMD in the build container, without containerd's cgroup v1 deprecation
# warning that every ctr call prints on cgroup v1 hosts
in_node() {
  docker exec "$BUILD_CTR" "$@" 2> >(grep -v 'DEPRECATION: The support for cgroup v1' >&2)
}
assemble() {
  docker run -d --name "$BUILD_CTR" --entrypoint=sleep --security-opt seccomp=unconfined \
    --network none "$BASE_IMAGE" infinity >/dev/null
  docker cp "$BIN/kubelet" "$BUILD_CTR:/usr/bin/kubelet"
  docker cp "$BIN/kubeadm" "$BUILD_CTR:/usr/bin/kubeadm"
  docker cp "$CP_BIN/kubectl" "$BUILD_CTR:/usr/bin/kubectl"
  docker exec "$BUILD_CTR" chown root:root /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl
  docker exec "$BUILD_CTR" chmod 0755 /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl
  printf '%s' "$K8S_VERSION" | docker exec -i "$BUILD_CTR" cp /dev/stdin /kind/version
  docker exec "$BUILD_CTR" mkdir -p /kind/manifests
  docker exec -i "$BUILD_CTR" cp /dev/stdin /kind/manifests/default-cni.yaml <"$KIND_TOOLS_DIR/node/default-cni.yaml"
  docker exec -i "$BUILD_CTR" cp /dev/stdin /kind/manifests/default-storage.yaml <"$WORK/default-storage.yaml"
  # every image kubeadm will ask for must be among the preloaded ones
  local wanted missing=() w m found
  wanted=$(docker exec "$BUILD_CTR" kubeadm config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
  for w in $wanted; do
    found=0
    for m in "${IMAGE_MAP[@]}"; do [[ "${m#* }" == "$w" ]] && found=1; done
    ((found)) || missing+=("$w")
  done
  ((${#missing[@]} == 0)) || kind_die "kubeadm wants images this recipe does not build: ${missing[*]}"

  docker exec "$BUILD_CTR" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  docker exec "$BUILD_CTR" bash -c 'for i in $(seq 20); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; cat /tmp/containerd.log; exit 1'
  docker exec -i "$BUILD_CTR" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - <"$WORK/images.tar" >/dev/null \
    2> >(grep -v 'DEPRECATION: The support for cgroup v1' >&2)
  for m in "${IMAGE_MAP[@]}"; do
    in_node ctr --namespace=k8s.io images tag --local --force \
      "$(normalize "${m%% *}")" "$(normalize "${m#* }")" >/dev/null
    in_node ctr --namespace=k8s.io images rm "$(normalize "${m%% *}")" >/dev/null
  done
  in_node ctr --namespace=k8s.io images list -q | grep -v '^sha256:' | grep -v '^import-' |
    sort >"$WORK/node-images.txt"
  for m in "${IMAGE_MAP[@]}"; do
    grep -qx "$(normalize "${m#* }")" "$WORK/node-images.txt" ||
      kind_die "image ${m#* } is missing in the node's containerd (have: $(tr '\n' ' ' <"$WORK/node-images.txt"))"
  done
  docker exec "$BUILD_CTR" pkill containerd
  # PID 1 here is `sleep`, which never reaps: wait until containerd is gone or a zombie
  docker exec "$BUILD_CTR" bash -c 'for i in $(seq 40); do ps -C containerd -o stat= | grep -qv "^Z" || exit 0; sleep 0.5; done; exit 1'
  docker exec "$BUILD_CTR" rm -f /tmp/containerd.log
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
    --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' "$BUILD_CTR" "$NODE_IMAGE" >/dev/null
  docker rm -f -v "$BUILD_CTR" >/dev/null
}
# containerd names an image "docker.io/NAME" when NAME has no registry host
normalize() {
  local first=${1%%/*}
  if [[ "$1" != */* ]]; then
    echo "docker.io/library/$1"
  elif [[ "$first" == *.* || "$first" == *:* || "$first" == localhost ]]; then
    echo "$1"
  else
    echo "docker.io/$1"
  fi
}
kind_timed "node-image: assemble" assemble

# ---- clean-up: intermediate tars and build-time images (their layers stay in the node image) -----
for m in "${IMAGE_MAP[@]}"; do docker image rm "${m%% *}" >/dev/null 2>&1 || true; done
for m in "${HELPER_IMAGES[@]}" "$BASE_IMAGE"; do docker image rm "$m" >/dev/null 2>&1 || true; done
rm -rf "$WORK"
# node images of earlier recipes: removed unless a container (a running cluster) still uses them
docker image ls --format '{{.Repository}}:{{.Tag}}' "${NODE_IMAGE%%:*}" | grep -vxF "$NODE_IMAGE" |
  while read -r old; do docker image rm "$old" >/dev/null 2>&1 && echo "removed the older node image $old" >&2; done || true
echo "$(date -u +%FT%TZ) node-image: total $(($(kind_now) - START))s $NODE_IMAGE" >>"$KIND_TIMES"
echo "node image $NODE_IMAGE built in $(($(kind_now) - START))s ($(docker image inspect -f '{{.Size}}' "$NODE_IMAGE") bytes)" >&2
echo "$NODE_IMAGE"

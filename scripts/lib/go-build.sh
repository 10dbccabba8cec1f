# Building Go binaries from their upstream modules into a cache kept per set of versions, the
# way tests/integration/controlplane/build.sh (the test control plane) and
# scripts/kind/build-binaries.sh (the kind node) do it. Sources come only through the Go
# module proxy and no prebuilt binary is downloaded; both scripts use the same Go settings, so
# they share one Go build cache (the kind node's Kubernetes build reuses the control plane's).
#
# Builds run at the niceness MSGSTORE_BUILD_NICE (default 0). scripts/test.sh gives the
# cluster process's builds 0, since on a cold machine its tests wait for them, and the other
# processes' 10. Under `nice -n 10` beside the tests a build took 4-7 times its quiet length
# (docs/TESTING.md, "Cold runs").
#
# Source it; it defines functions only. The sourcing script sets GO_BUILD_DIE to the name of
# its failure function (called with a message; it must exit) and defines `all_present`, which
# tells whether every binary it was asked for is in its cache already.

# go_build_fail MESSAGE...: the sourcing script's failure function.
go_build_fail() {
  "${GO_BUILD_DIE:?GO_BUILD_DIE names the failure function}" "$@"
}

# go_build_prepare WHAT BIN ROOT DIR...: exits the script (printing BIN, as its last line)
# when `all_present`; else checks Go, makes BIN and the other DIRs, takes the cache's lock
# (one build at a time per cache; parallel test runs may call the scripts), exits as before
# when a build that held the lock made everything, and sets the Go build environment.
go_build_prepare() {
  local what=$1 bin=$2 root=$3 minor
  shift 3
  if all_present; then
    echo "$what binaries up to date in $bin" >&2
    echo "$bin"
    exit 0
  fi
  command -v go >/dev/null 2>&1 || go_build_fail "Go is not installed (need go >= 1.26 on PATH)"
  minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
  [[ "$minor" =~ ^[0-9]+$ && "$minor" -ge 26 ]] ||
    go_build_fail "need Go >= 1.26, found $(go env GOVERSION)"
  mkdir -p "$bin" "$@"
  exec 9>"$root/.lock"
  flock 9
  if all_present; then
    echo "$bin"
    exit 0
  fi
  # Never fetch a toolchain; sources only through the module proxy, checksums via its sumdb
  # mirror.
  export GOTOOLCHAIN=local
  # -dwarf=false: every build links with -s -w, which drops DWARF anyway; not generating it
  # saves about a tenth of the compiling (helm from an empty build cache: 148 -> 131 CPU s)
  export GOFLAGS="-trimpath -mod=mod -buildvcs=false -gcflags=all=-dwarf=false"
  export CGO_ENABLED=0
  export GOPROXY="${GOPROXY:-https://proxy.golang.org}"
  unset GOBIN
}

# go_build_log_failure LOG: the end of a failed step's log, on stderr.
go_build_log_failure() {
  echo "---- last lines of $1 ----" >&2
  tail -n 40 "$1" >&2
}

# go_wrapper_module DIR MODULE: a fresh throwaway module whose only job is to pin versions for
# `go build`.
go_wrapper_module() {
  local dir=$1 module=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  printf 'module %s\n\ngo 1.26.0\n' "$module" >"$dir/go.mod"
}

# go_k8s_wrapper DIR MODULE: a wrapper module requiring k8s.io/kubernetes@$K8S_VERSION.
# k8s.io/kubernetes points its staging modules at ./staging (v0.0.0); each is pinned to the
# published version of the same release instead. Fails (status 1) when the module proxy does
# not serve that release.
go_k8s_wrapper() {
  local dir=$1 kmod staging
  go_wrapper_module "$dir" "$2"
  (
    cd "$dir"
    kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [[ -f "$kmod" ]] || go_build_fail "could not fetch k8s.io/kubernetes@$K8S_VERSION from the module proxy"
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$kmod" |
      while read -r staging; do
        go mod edit -replace="$staging=$staging@${K8S_VERSION/v1./v0.}"
      done
  )
}

# go_k8s_ldflags: the -ldflags of a Kubernetes binary of $K8S_VERSION (its version stamped as a
# release build would carry it).
go_k8s_ldflags() {
  local minor=${K8S_VERSION#v1.} flags="-s -w" pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

#!/usr/bin/env bash
# Records and restores the host settings that a kind cluster changes on this host.
#
#   scripts/kind/host-settings.sh save DIR     record them in DIR (refuses to overwrite a record)
#   scripts/kind/host-settings.sh restore DIR  put back every recorded value that differs, remove
#                                              a /lib/modules that did not exist before, then
#                                              delete the record
#   scripts/kind/host-settings.sh diff DIR     list what differs from the record (exit 1 if any)
#   scripts/kind/host-settings.sh favour-containers DIR SHARES
#                                              give the container engine's CPU cgroup SHARES
#                                              (cgroup v1 cpu.shares; the matching cpu.weight on
#                                              v2), recording the value it had in DIR for restore
#
# Why: kind nodes share the host kernel, and a node container (--privileged, or its replacement
# on hosts without CAP_SYS_RESOURCE) may write host-global sysctls. Seen on a Debian 12 host
# (3-node cluster, kernel 6.18): the kubelets set vm.overcommit_memory=1, kernel.panic=10 and
# kernel.panic_on_oops=1; the nodes' systemd sets fs.file-max and, through its sysctl.d files,
# fs.protected_{symlinks,regular,fifos}; dockerd turns on net.ipv6.conf.all.forwarding for kind's
# IPv6-enabled network and creates an empty /lib/modules for kind's bind mount when it is absent.
# The other keys are ones the kubelet (vm.panic_on_oom, kernel.keys.*), kube-proxy
# (net.netfilter.nf_conntrack_*; kind's kube-proxy config skips nf_conntrack_max) or systemd
# (kernel.pid_max, kernel.sysrq, ...) may write on other hosts. Keys the kernel lacks are skipped.
#
# favour-containers: the engine puts every container in one CPU cgroup (/docker with the
# cgroupfs driver), which competes with each host process as a single nice-0 process does. A
# kind cluster (API server, etcd, kubelets, its pods) then gets a few percent of the CPU beside a
# busy test run: a loaded CI run saw the API server miss its liveness probes and restart.
# Raising the group's shares lets the cluster take that many processes' part when it needs it;
# an idle cluster still leaves the CPU to the host.
set -euo pipefail

KEYS=(
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal
  net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.ipv4.conf.all.arp_ignore
  net.ipv4.conf.all.rp_filter net.ipv4.conf.default.rp_filter
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  kernel.pid_max kernel.sysrq kernel.core_uses_pid kernel.kptr_restrict
  fs.protected_hardlinks fs.protected_symlinks fs.protected_regular fs.protected_fifos
  fs.inotify.max_user_watches fs.inotify.max_user_instances fs.file-max fs.nr_open
  net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding
  net.core.default_qdisc
)
RECORD=sysctl.txt
MODULES_RECORD=lib-modules.txt
CGROUP_RECORD=cgroup.txt
# the container engine's CPU cgroup, cgroup v1 (cpu.shares) and v2 (cpu.weight)
ENGINE_CGROUP_FILES=(/sys/fs/cgroup/cpu/docker/cpu.shares /sys/fs/cgroup/docker/cpu.weight)

die() {
  echo "host-settings: $*" >&2
  exit 2
}

proc_path() { echo "/proc/sys/$(echo "$1" | tr . /)"; }

read_key() { # prints the value with tabs/newlines folded to single spaces
  tr -s '\t\n' '  ' <"$(proc_path "$1")" | sed 's/ *$//'
}

cmd=${1:-}
dir=${2:-}
if [[ "$cmd" == favour-containers ]]; then
  shares=${3:-}
  [[ -n "$dir" && $# -eq 3 && "$shares" =~ ^[0-9]+$ ]] && ((shares >= 2 && shares <= 262144)) \
    || die "usage: $0 favour-containers DIR SHARES (2..262144)"
  mkdir -p "$dir"
  for f in "${ENGINE_CGROUP_FILES[@]}"; do
    [[ -w "$f" ]] || continue
    # the first value seen is the one to restore; a second call keeps it
    grep -q "^$f"$'\t' "$dir/$CGROUP_RECORD" 2>/dev/null || printf '%s\t%s\n' "$f" "$(cat "$f")" >>"$dir/$CGROUP_RECORD"
    if [[ "$f" == */cpu.weight ]]; then value=$((shares * 100 / 1024)); else value=$shares; fi
    printf '%s\n' "$value" >"$f" || die "could not write $value to $f"
    echo "container engine CPU cgroup: $f = $value" >&2
  done
  exit 0
fi
[[ -n "$cmd" && -n "$dir" && $# -eq 2 ]] || die "usage: $0 save|restore|diff|favour-containers DIR"

case "$cmd" in
  save)
    [[ -e "$dir/$RECORD" ]] && die "$dir/$RECORD exists: a record is already kept there (restore it first)"
    mkdir -p "$dir"
    tmp="$dir/$RECORD.tmp"
    : >"$tmp"
    for k in "${KEYS[@]}"; do
      [[ -r "$(proc_path "$k")" ]] || continue
      printf '%s\t%s\n' "$k" "$(read_key "$k")" >>"$tmp"
    done
    if [[ -e /lib/modules ]]; then echo present >"$dir/$MODULES_RECORD"; else echo absent >"$dir/$MODULES_RECORD"; fi
    mv "$tmp" "$dir/$RECORD"
    echo "host settings recorded in $dir ($(wc -l <"$dir/$RECORD") sysctls, /lib/modules $(cat "$dir/$MODULES_RECORD"))" >&2
    ;;
  diff | restore)
    # put_back NAME FILE NOW SAVED: (diff) report, (restore) write back, a value that changed
    put_back() {
      [[ "$3" == "$4" ]] && return 0
      differ=1
      if [[ "$cmd" == diff ]]; then
        echo "$1: recorded '$4', now '$3'"
      elif printf '%s\n' "$4" >"$2" 2>/dev/null; then
        echo "restored $1: '$3' -> '$4'" >&2
      else
        echo "host-settings: could not restore $1 to '$4' (now '$3')" >&2
        failed=1
      fi
    }
    [[ -f "$dir/$RECORD" ]] || die "no record in $dir (expected $dir/$RECORD from '$0 save $dir')"
    differ=0 failed=0
    while IFS=$'\t' read -r k saved; do
      [[ -r "$(proc_path "$k")" ]] || continue
      put_back "$k" "$(proc_path "$k")" "$(read_key "$k")" "$saved"
    done <"$dir/$RECORD"
    if [[ -f "$dir/$MODULES_RECORD" && "$(cat "$dir/$MODULES_RECORD")" == absent && -e /lib/modules ]]; then
      differ=1
      if [[ "$cmd" == diff ]]; then
        echo "/lib/modules: absent before, now present"
      elif [[ -d /lib/modules && ! -L /lib/modules ]] && rmdir /lib/modules 2>/dev/null; then
        echo "removed the empty /lib/modules that the container engine created" >&2
      else
        echo "host-settings: /lib/modules did not exist before but is not an empty directory now; left alone" >&2
        failed=1
      fi
    fi
    if [[ -f "$dir/$CGROUP_RECORD" ]]; then
      while IFS=$'\t' read -r f saved; do
        [[ -e "$f" ]] || continue # the engine's cgroup went with the engine
        put_back "$f" "$f" "$(cat "$f")" "$saved"
      done <"$dir/$CGROUP_RECORD"
    fi
    if [[ "$cmd" == diff ]]; then
      exit "$differ"
    fi
    ((failed == 0)) || die "some settings could not be restored; the record stays in $dir"
    rm -f "$dir/$RECORD" "$dir/$MODULES_RECORD" "$dir/$CGROUP_RECORD"
    rmdir "$dir" 2>/dev/null || true
    ;;
  *) die "unknown command '$cmd' (usage: $0 save|restore|diff|favour-containers DIR)" ;;
esac

#!/usr/bin/env python3
"""Patch kind's node entrypoint so that a node also boots when it is not --privileged.

On hosts whose capability bounding set lacks CAP_SYS_RESOURCE, scripts/kind/shim/docker runs
nodes with --cap-add=ALL --cap-drop=SYS_RESOURCE --security-opt systempaths=unconfined instead
of --privileged. For such containers Docker mounts the cgroup v1 controllers read-only, and a
negative oom_score_adj cannot be written. The added function, run before kind's own fix-ups:
remounts read-only cgroup mounts read-write (a no-op in a --privileged node, whose cgroup mounts
are already read-write) and, only when CAP_SYS_RESOURCE is missing, sets containerd's
restrict_oom_score_adj. Nodes on other hosts behave exactly as stock kind nodes.

Usage: patch-entrypoint.py PATH_TO_ENTRYPOINT
"""

import sys

FUNCTION = r"""
fix_unprivileged() {
  local m
  for m in $(findmnt -rn -o TARGET,OPTIONS | awk '$1 ~ "^/sys/fs/cgroup" && $2 ~ /(^|,)ro(,|$)/ {print $1}'); do
    log_info "remounting ${m} read-write (container is not --privileged)"
    mount -o remount,bind,rw "$m"
  done
  if (( ( 0x$(awk '/^CapBnd/ {print $2}' /proc/self/status) >> 24 & 1 ) == 0 )); then
    log_info 'no CAP_SYS_RESOURCE: enabling containerd restrict_oom_score_adj'
    sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
  fi
}
"""


def main(path: str) -> None:
    with open(path) as f:
        text = f.read()
    if "\nfix_unprivileged() {" in text:
        return
    if text.count("\nvalidate_userns\n") != 1 or text.count("\nfix_mount\n") != 1:
        sys.exit(f"{path}: kind's entrypoint layout changed; the patch needs a review")
    text = text.replace("\nvalidate_userns\n", FUNCTION + "\nvalidate_userns\n", 1)
    text = text.replace("\nfix_mount\n", "\nfix_unprivileged\nfix_mount\n", 1)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1])

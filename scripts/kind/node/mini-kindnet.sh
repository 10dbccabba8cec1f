#!/bin/bash
# mini-kindnet: the part of kindnetd that a kind cluster needs, as a shell loop.
# (kindnetd's own module, sigs.k8s.io/kind/images/kindnetd, is not served by the module proxy.)
# Traffic from this node's pods to anything outside the pod CIDRs (the host, other containers)
# is masqueraded, as kindnetd does. It re-reads the node list every RESYNC_SECONDS (default 2)
# while something changes, and backs off to STEADY_SECONDS (default 10) once a pass changed
# nothing: each pass starts kubectl, which cost about 0.1 CPU s, on every node, every pass.
# No NetworkPolicy.
# Per node: writes a ptp + host-local + portmap CNI conflist for this node's podCIDR, and
# routes every other node's podCIDR via that node's InternalIP (all kind nodes share one bridge).
set -u
: "${NODE_NAME:?NODE_NAME must be set (downward API)}"
CONF_DIR=/etc/cni/net.d
CONF=$CONF_DIR/10-kindnet.conflist
SA=/var/run/secrets/kubernetes.io/serviceaccount
MTU=${CNI_MTU:-1500}
sysctl -w net.ipv4.ip_forward=1 >/dev/null 2>&1 || echo "warning: could not set net.ipv4.ip_forward" >&2
# sync_masquerade OWN_CIDR ALL_CIDRS...: MASQUERADE what leaves OWN_CIDR for outside ALL_CIDRS
sync_masquerade() {
  local own=$1 c
  shift
  iptables -t nat -N MINI-KINDNET-MASQ 2>/dev/null || true
  iptables -t nat -F MINI-KINDNET-MASQ || return 1
  for c in "$@"; do iptables -t nat -A MINI-KINDNET-MASQ -d "$c" -j RETURN || return 1; done
  iptables -t nat -A MINI-KINDNET-MASQ -j MASQUERADE || return 1
  iptables -t nat -C POSTROUTING -s "$own" -j MINI-KINDNET-MASQ 2>/dev/null ||
    iptables -t nat -A POSTROUTING -s "$own" -j MINI-KINDNET-MASQ || return 1
  echo "masquerading traffic from $own to destinations outside $*"
}
masq_state=""
pause=${RESYNC_SECONDS:-2}
echo "mini-kindnet on $NODE_NAME (control plane: ${CONTROL_PLANE_ENDPOINT:-in-cluster service})"
while true; do
  changed=0
  args=()
  if [ -n "${CONTROL_PLANE_ENDPOINT:-}" ]; then
    # talk to the API server directly, so the CNI does not wait for kube-proxy (as kindnetd does)
    args=(--server="https://${CONTROL_PLANE_ENDPOINT}" --token="$(cat "$SA/token")" --certificate-authority="$SA/ca.crt")
  fi
  if out=$(kubectl "${args[@]}" get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.podCIDR}{" "}{range .status.addresses[?(@.type=="InternalIP")]}{.address}{end}{"\n"}{end}' 2>&1); then
    while read -r name cidr ip; do
      # a node without its podCIDR or address yet: not steady, look again soon
      [ -n "${cidr:-}" ] && [ -n "${ip:-}" ] || { changed=1; continue; }
      if [ "$name" = "$NODE_NAME" ]; then
        want=$(cat <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": $MTU,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [ { "dst": "0.0.0.0/0" } ],
        "ranges": [ [ { "subnet": "$cidr" } ] ]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
JSON
)
        if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$want" ]; then
          mkdir -p "$CONF_DIR"
          printf '%s\n' "$want" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF" && echo "wrote $CONF (podCIDR $cidr)"
          changed=1
        fi
      else
        current=$(ip route show exact "$cidr" 2>/dev/null)
        if [[ "$current" != "$cidr via $ip "* ]]; then
          ip route replace "$cidr" via "$ip" && echo "route $cidr via $ip ($name)"
          changed=1
        fi
      fi
    done <<<"$out"
    cidrs=$(awk '$2 != "" {print $2}' <<<"$out" | sort | tr '\n' ' ')
    own=$(awk -v n="$NODE_NAME" '$1 == n {print $2}' <<<"$out")
    if [ -n "$own" ] && [ "$own|$cidrs" != "$masq_state" ]; then
      # shellcheck disable=SC2086 # one argument per CIDR
      sync_masquerade "$own" $cidrs && masq_state="$own|$cidrs"
      changed=1
    fi
  else
    echo "kubectl: $out" >&2
    changed=1
  fi
  # a pass that changed something (or failed) is followed soon; a steady one later and later
  if ((changed)); then pause=${RESYNC_SECONDS:-2}; else pause=$((pause * 2)); fi
  ((pause > ${STEADY_SECONDS:-10})) && pause=${STEADY_SECONDS:-10}
  sleep "$pause"
done

#!/bin/bash
# Entrypoint of the NetworkPolicy enforcer (scripts/kind/network-policies.sh): sends the first
# packet of every new connection from or to a pod to NFQUEUE $NFQUEUE_ID, where
# kube-network-policies judges it against the NetworkPolicies, then runs the engine. These are
# the packets upstream's nftables rules queue (postrouting, before source NAT): not the
# packets of established connections, not DNS, not the node's own root processes (the
# kubelet's probes). --queue-bypass: while no engine listens, packets pass (as upstream's
# --fail-open), so a node never loses its pods' network to a restarting enforcer.
set -euo pipefail
: "${POD_CIDR:?POD_CIDR must be set: the pod network of the cluster, e.g. 10.244.0.0/16}"
Q=${NFQUEUE_ID:-100}
CHAIN=MSGSTORE-NETPOL
ipt() { iptables -w 5 "$@"; }

ipt -t mangle -N "$CHAIN" 2>/dev/null || true
ipt -t mangle -F "$CHAIN"
ipt -t mangle -A "$CHAIN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
ipt -t mangle -A "$CHAIN" -p udp --dport 53 -j RETURN
ipt -t mangle -A "$CHAIN" -m owner --uid-owner 0 -j RETURN
ipt -t mangle -A "$CHAIN" -s "$POD_CIDR" -j NFQUEUE --queue-num "$Q" --queue-bypass
ipt -t mangle -A "$CHAIN" -d "$POD_CIDR" -j NFQUEUE --queue-num "$Q" --queue-bypass
ipt -t mangle -C POSTROUTING -j "$CHAIN" 2>/dev/null || ipt -t mangle -A POSTROUTING -j "$CHAIN"
echo "diverting new connections of $POD_CIDR to NFQUEUE $Q"

stop() {
  ipt -t mangle -D POSTROUTING -j "$CHAIN" 2>/dev/null || true
  ipt -t mangle -F "$CHAIN" 2>/dev/null || true
  ipt -t mangle -X "$CHAIN" 2>/dev/null || true
  [[ -n "${engine:-}" ]] && kill -TERM "$engine" 2>/dev/null || true
}
trap 'stop; wait; exit 0' TERM INT
/usr/local/bin/kube-network-policies --nfqueue-id="$Q" --disable-nri \
  --netfilter-bug-1766-fix=false --metrics-bind-address=127.0.0.1:9080 "$@" &
engine=$!
rc=0
wait "$engine" || rc=$?
stop
exit "$rc"

"""Replicated commit logs (RocketMQ HA): each node's log is copied byte for byte by
follower nodes, which rebuild its indexes from it; a controller fails a lost leader over to
the most caught-up follower under a new leader epoch, and every node fences older epochs.

Modules: ``epochs`` (leader-epoch history, fencing), ``shipping`` (the frame stream: what a
leader sends and how a follower checks it), ``follower`` (the copy loop), ``insync`` (the
in-sync set and acknowledgement waits), ``replicas`` (the logs one node hosts), and
``controller`` (failover). This package sits beside the server layer: it uses the store and
the routing table, and the server's routes use it.
"""

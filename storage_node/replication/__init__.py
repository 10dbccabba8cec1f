"""Replicated commit logs (RocketMQ HA): each node's log is copied byte for byte by
follower nodes, which rebuild its indexes from it; a controller fails a lost leader over to
the most caught-up follower under a new leader epoch, and every node fences older epochs.

Modules: ``epochs`` (leader-epoch history, fencing), ``shipping`` (the frame stream: what a
leader sends and how a follower checks it), ``leader`` (the leader's half: answering a
follower's fetch), ``follower`` (the copy loop), ``insync`` (the in-sync set and
acknowledgement waits), ``hosted_log`` (one log on a node), ``log_identity`` (the IP of a
log's message IDs), ``replicas`` (the logs one node hosts), and ``controller`` (failover).
It uses the store (through its public surface) and the routing table; the partition service
and the server's replication routes use it.
"""

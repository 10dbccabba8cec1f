"""The web console: a process of its own (``msgstore console``), a client of the cluster
through ``storage_node.client`` like RocketMQ Dashboard or kafka-ui, rendering pages on
the server for the people who troubleshoot with msgstore (docs/CONSOLE.md). Every page
asks the nodes' HTTP API with the logged-in user's token, so the nodes enforce each
user's rights; the console keeps only sessions and a short history of the metrics."""

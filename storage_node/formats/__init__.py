"""Layer 1, with backend: pure definitions every layer above shares.

One module per on-disk file kind (each writes, reads, verifies and rebuilds itself; the pure
compaction functions in ``compressed`` and ``key_index_compacted`` also run on Spark
executors), and the rules the store, the wire formats, the client and the Spark jobs agree on:
``names`` (what a topic or group may be called), ``limits``, ``keyhash`` and ``partitioning``.
Importing the package loads none of them.
"""

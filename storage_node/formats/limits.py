"""Limits every layer agrees on: the store enforces them, the HTTP API checks its query
parameters against them, and the client-side tools (Spark options) stay within them."""

from __future__ import annotations

from storage_node.errors import InvalidBatch

MAX_READ_MESSAGES = 10_000  # messages in one read page
MAX_LOOKUP = 10_000  # messages one key lookup answers
# Partitions of one topic, for the store, the routing table, the HTTP API and the Kafka
# listener alike. A record frame names its partition in 16 bits (formats/record.py); the
# bound is lower because each partition a node writes holds a queue index (up to 4 open files
# and up to 64 KiB of entries not yet written, formats/queue_index.py).
MAX_PARTITIONS = 8192

# The empty-key rule, one for every way in (HTTP JSON and binary batches, the clients, the
# CLI, the Spark writer and ingest job, the Kafka listener): a key is at least one byte. An
# empty key would be stored under a key nobody can look up (``/keys/{key}`` has no empty
# segment), so it is refused with a message saying how to send a message without a key.
EMPTY_KEY_HINT = "leave the key out for a message without one"
EMPTY_KEY_RULE = f"a key must not be empty: {EMPTY_KEY_HINT}"


def check_key(key: object, index: int | None = None) -> None:
    """Refuse an empty key (``InvalidBatch`` naming message ``index`` when given)."""
    if key == "" or key == b"":
        if index is None:
            raise InvalidBatch(EMPTY_KEY_RULE, field="key")
        raise InvalidBatch(f"message {index}: {EMPTY_KEY_RULE}", index=index, field="key")

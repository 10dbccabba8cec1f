"""msgstore: a message and log store (commit log, queue/key/message-ID indexes, tiering)."""

__version__ = "0.1.0"

"""Limits every layer agrees on: the store enforces them, the HTTP API checks its query
parameters against them, and the client-side tools (Spark options) stay within them."""

from __future__ import annotations

MAX_READ_MESSAGES = 10_000  # messages in one read page
MAX_LOOKUP = 10_000  # messages one key lookup answers

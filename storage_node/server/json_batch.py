"""A JSON produce body into the store's packed columns.

The envelope (messages, producer_id, sequence) is checked by the ``BatchEnvelope`` model; the
messages by the column-wise check of ``message_json``, which builds no object per message.
A batch that check does not cover (base64 or non-ASCII values, or a bad field) goes through
the full ``Batch`` model, which names the exact message and field of a problem. Validating
every batch with the model costs about three times the column check on a 1,000-message batch
(docs/NODE_API.md has the measurement), so the common batch keeps the column path.
"""

from __future__ import annotations

import json
from typing import Any

from storage_node.errors import InvalidBatch
from storage_node.formats.packed import PackedBatch
from storage_node.server.api_models import Batch, BatchEnvelope, parse
from storage_node.wire.message_json import packed_columns


def parse_json_batch(doc: Any, max_messages: int) -> tuple[PackedBatch, str | None, int | None]:
    """Validate a decoded JSON produce body; (packed columns, producer id, sequence)."""
    envelope = parse(BatchEnvelope, doc, InvalidBatch)
    if len(envelope.messages) > max_messages:
        raise InvalidBatch(
            f"a batch holds at most {max_messages} messages, got {len(envelope.messages)}",
            max_messages=max_messages,
        )
    batch = packed_columns(envelope.messages)
    if batch is None:
        batch = parse(Batch, doc, InvalidBatch).packed()
    return batch, envelope.producer_id, envelope.sequence


def decode_json_batch(body: bytes, max_messages: int) -> tuple[PackedBatch, str | None, int | None]:
    """``parse_json_batch`` of the raw body (400 when it is not JSON)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidBatch(f"the body is not valid JSON: {exc}") from None
    return parse_json_batch(doc, max_messages)

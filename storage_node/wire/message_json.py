"""JSON shapes of messages: request batches in, stored messages out."""

from __future__ import annotations

import base64
import binascii
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from storage_node.errors import InvalidBatch
from storage_node.formats.packed import PackedBatch, PackedColumn

if TYPE_CHECKING:
    from storage_node.store.types import AppendColumns

MESSAGE_FIELDS = frozenset(
    {"key", "tag", "value", "value_base64", "msg_id", "timestamp", "partition"}
)
BATCH_FIELDS = frozenset({"messages", "producer_id", "sequence"})


def _opt_str(item: dict[str, Any], name: str, index: int) -> str | None:
    value = item.get(name)
    if value is None or isinstance(value, str):
        return value
    raise InvalidBatch(f"messages[{index}].{name} must be a string", index=index)


def _opt_nonneg_int(item: dict[str, Any], name: str, index: int) -> int | None:
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >= 2**63:
        raise InvalidBatch(f"messages[{index}].{name} must be an integer >= 0", index=index)
    return value


def _envelope(body: object, max_messages: int) -> tuple[list, Any, Any]:
    """The batch object around the messages: (messages, producer id, sequence)."""
    if not isinstance(body, dict):
        raise InvalidBatch("the body must be a JSON object with a 'messages' list")
    unknown = set(body) - BATCH_FIELDS
    if unknown:
        raise InvalidBatch(f"unknown fields in the batch: {', '.join(sorted(unknown))}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidBatch("'messages' must be a non-empty list")
    if len(messages) > max_messages:
        raise InvalidBatch(
            f"a batch holds at most {max_messages} messages, got {len(messages)}",
            max_messages=max_messages,
        )
    producer_id = body.get("producer_id")
    sequence = body.get("sequence")
    if producer_id is not None and (not isinstance(producer_id, str) or not producer_id):
        raise InvalidBatch("'producer_id' must be a non-empty string")
    if sequence is not None and (
        isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence < 2**63
    ):
        raise InvalidBatch("'sequence' must be an integer >= 0")
    if (producer_id is None) != (sequence is None):
        raise InvalidBatch("'producer_id' and 'sequence' go together")
    return messages, producer_id, sequence


def parse_batch_json(body: object, max_messages: int) -> tuple[list[dict[str, Any]], Any, Any]:
    """Validate a JSON produce body; return plain field dicts plus producer id and sequence.

    Each returned dict has exactly: value (bytes), key, tag, msg_id, timestamp, partition.
    """
    messages, producer_id, sequence = _envelope(body, max_messages)
    out: list[dict[str, Any]] = []
    for index, item in enumerate(messages):
        if not isinstance(item, dict):
            raise InvalidBatch(f"messages[{index}] must be an object", index=index)
        if not item.keys() <= MESSAGE_FIELDS:
            extra = ", ".join(sorted(set(item) - MESSAGE_FIELDS))
            raise InvalidBatch(f"messages[{index}] has unknown fields: {extra}", index=index)
        text = item.get("value")
        b64 = item.get("value_base64")
        if (text is None) == (b64 is None):
            raise InvalidBatch(
                f"messages[{index}] needs exactly one of 'value' and 'value_base64'", index=index
            )
        if text is not None:
            if not isinstance(text, str):
                raise InvalidBatch(f"messages[{index}].value must be a string", index=index)
            try:
                value = text.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidBatch(
                    f"messages[{index}].value is not encodable as UTF-8", index=index
                ) from None
        else:
            if not isinstance(b64, str):
                raise InvalidBatch(f"messages[{index}].value_base64 must be a string", index=index)
            try:
                value = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidBatch(
                    f"messages[{index}].value_base64 is not valid base64", index=index
                ) from None
        out.append(
            {
                "value": value,
                "key": _opt_str(item, "key", index),
                "tag": _opt_str(item, "tag", index),
                "msg_id": _opt_str(item, "msg_id", index),
                "timestamp": _opt_nonneg_int(item, "timestamp", index),
                "partition": _opt_nonneg_int(item, "partition", index),
            }
        )
    return out, producer_id, sequence


def parse_batch_packed(body: object, max_messages: int) -> tuple[PackedBatch, Any, Any]:
    """``parse_batch_json`` straight into packed columns, checked column by column.

    The usual batch (text values, string keys) never builds an object per message; any
    batch the column checks do not cover goes through ``parse_batch_json``, which names
    the exact message and field of a problem.
    """
    messages, producer_id, sequence = _envelope(body, max_messages)
    batch = _packed_fast(messages)
    if batch is None:
        items, _p, _s = parse_batch_json(body, max_messages)
        batch = PackedBatch.from_lists(
            *([m[f] for m in items] for f in ("value", "key", "tag", "msg_id", "timestamp")),
            partitions=[m["partition"] for m in items],
        )
    return batch, producer_id, sequence


_STR_OR_NONE = frozenset({str, type(None)})
_INT_OR_NONE = frozenset({int, type(None)})


def _packed_fast(messages: list) -> PackedBatch | None:
    """Packed columns of plain messages, or None when a column needs the per-message path."""
    n = len(messages)
    if set(map(type, messages)) != {dict}:
        return None
    if not set().union(*messages) <= MESSAGE_FIELDS - {"value_base64"}:
        return None
    column = {f: list(map(dict.get, messages, repeat(f))) for f in _COLUMNS}
    values = column["value"]
    try:
        text = "".join(values)
    except TypeError:  # a missing or non-string value
        return None
    if not text.isascii():
        return None
    packed = {}
    for name in ("key", "tag", "msg_id"):
        if not set(map(type, column[name])) <= _STR_OR_NONE:
            return None
        packed[name] = PackedColumn.of_text(column[name], name)
    numbers = {}
    for name in ("timestamp", "partition"):
        items = column[name]
        if items.count(None) == n:
            numbers[name] = None
            continue
        if not set(map(type, items)) <= _INT_OR_NONE:
            return None
        given = [v for v in items if v is not None]
        if min(given) < 0 or max(given) >= 2**63:
            return None
        numbers[name] = np.array([-1 if v is None else v for v in items], dtype=np.int64)
    return PackedBatch(
        values=PackedColumn(text.encode(), np.fromiter(map(len, values), np.int64, n)),
        keys=packed["key"],
        tags=packed["tag"],
        msg_ids=packed["msg_id"],
        timestamps=numbers["timestamp"],
        partitions=numbers["partition"],
    )


_COLUMNS = ("value", "key", "tag", "msg_id", "timestamp", "partition")
_RESULT = '{"partition":%d,"offset":%d,"msg_id":"%s"}'


def results_json(done: AppendColumns) -> bytes:
    """The JSON answer to an append, formatted in one pass (message IDs are plain ASCII:
    ``app-iphex-hour-seq`` with app in ``[A-Za-z0-9._-]``)."""
    rows = map(_RESULT.__mod__, zip(done.partitions, done.offsets, done.msg_ids, strict=True))
    return ('{"results":[' + ",".join(rows) + "]}").encode()


def message_to_json(message: Any) -> dict[str, Any]:
    """A stored message as JSON: ``value`` when UTF-8 text, else ``value_base64``."""
    doc: dict[str, Any] = {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "key": message.key,
        "tag": message.tag,
        "msg_id": message.msg_id,
        "timestamp": message.timestamp,
        "store_timestamp": message.store_timestamp,
    }
    try:
        doc["value"] = message.value.decode("utf-8")
    except UnicodeDecodeError:
        doc["value_base64"] = base64.b64encode(message.value).decode("ascii")
    return doc


def file_info_to_json(info: Any) -> dict[str, Any]:
    return {
        "kind": info.kind,
        "state": info.state,
        "name": info.name,
        "size": info.size,
        "stored_size": info.stored_size,
        "begin_ms": info.begin_ms,
        "end_ms": info.end_ms,
    }


def topic_config_to_json(cfg: Any) -> dict[str, Any]:
    return {
        "name": cfg.name,
        "partitions": cfg.partitions,
        "compression": cfg.compression,
        "retention_hours": cfg.retention_hours,
    }

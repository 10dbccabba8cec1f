"""JSON shapes of messages: request batches in (column by column), stored messages out."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from storage_node.formats.packed import PackedBatch, PackedColumn

if TYPE_CHECKING:
    from storage_node.store.types import AppendColumns

MESSAGE_FIELDS = frozenset(
    {"key", "tag", "value", "value_base64", "msg_id", "timestamp", "partition"}
)


_STR_OR_NONE = frozenset({str, type(None)})
_INT_OR_NONE = frozenset({int, type(None)})


def packed_columns(messages: list) -> PackedBatch | None:
    """Packed columns of plain messages (text values, string keys), checked column by column
    without an object per message; None when a column needs the per-message check (the
    request model), which also names the exact message and field of a problem."""
    n = len(messages)
    if set(map(type, messages)) != {dict}:
        return None
    if not set().union(*messages) <= MESSAGE_FIELDS - {"value_base64"}:
        return None
    column: dict[str, list[Any]] = {f: list(map(dict.get, messages, repeat(f))) for f in _COLUMNS}
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
    if "" in column["key"]:
        return None  # an empty key: the model refuses it by the empty-key rule
    numbers: dict[str, np.ndarray | None] = {}
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


def value_json(value: bytes) -> dict[str, str]:
    """A message value as the JSON shapes carry it: ``value`` when it is UTF-8 text, else
    ``value_base64``."""
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"value_base64": base64.b64encode(value).decode("ascii")}


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
    doc.update(value_json(message.value))
    headers = getattr(message, "headers", ())
    if headers:
        doc.update(headers_json(headers))
    return doc


def message_fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message's JSON (``message_to_json``'s shape) back as its fields but the
    headers, the value as bytes. Each reader builds its own message type from them and reads
    the headers its way: a node the store's Message (``headers_from_json``), the console its
    own (it never loads the store)."""
    text = doc.get("value")
    value = text.encode("utf-8") if text is not None else base64.b64decode(doc["value_base64"])
    return {
        "topic": doc["topic"],
        "partition": doc["partition"],
        "offset": doc["offset"],
        "key": doc.get("key"),
        "tag": doc.get("tag"),
        "msg_id": doc["msg_id"],
        "timestamp": doc["timestamp"],
        "store_timestamp": doc["store_timestamp"],
        "value": value,
    }


def headers_json(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, Any]:
    """A message's headers as the JSON shapes carry them, by the values' rule: ``headers``
    (a list of [name, value] pairs, value text or null) when every value is UTF-8 text, else
    ``headers_base64`` (the same pairs, every value base64)."""
    try:
        return {"headers": [[k, None if v is None else v.decode("utf-8")] for k, v in headers]}
    except UnicodeDecodeError:
        return {
            "headers_base64": [
                [k, None if v is None else base64.b64encode(v).decode("ascii")] for k, v in headers
            ]
        }


def headers_from_json(doc: dict[str, Any]) -> tuple[tuple[str, bytes | None], ...]:
    """The headers of a JSON message (``headers`` or ``headers_base64``; none when
    neither); ValueError naming what is wrong."""
    text, b64 = doc.get("headers"), doc.get("headers_base64")
    if text is not None and b64 is not None:
        raise ValueError("give 'headers' or 'headers_base64', not both")
    pairs = text if text is not None else b64
    if pairs is None:
        return ()
    if not isinstance(pairs, list):
        raise ValueError("headers must be a list of [name, value] pairs")
    out: list[tuple[str, bytes | None]] = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2 or not isinstance(pair[0], str):
            raise ValueError("a header is a [name, value] pair with a string name")
        name, value = pair
        if value is None:
            out.append((name, None))
        elif not isinstance(value, str):
            raise ValueError(f"the value of header {name!r} must be a string or null")
        elif b64 is not None:
            try:
                out.append((name, base64.b64decode(value, validate=True)))
            except (binascii.Error, ValueError):
                raise ValueError(f"the value of header {name!r} is not valid base64") from None
        else:
            out.append((name, value.encode("utf-8")))
    return tuple(out)


FILE_INFO_FIELDS = ("kind", "state", "name", "size", "stored_size", "begin_ms", "end_ms")
TOPIC_CONFIG_FIELDS = ("name", "partitions", "compression", "retention_hours")


def file_info_to_json(info: Any) -> dict[str, Any]:
    return {name: getattr(info, name) for name in FILE_INFO_FIELDS}


def topic_config_to_json(cfg: Any) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in TOPIC_CONFIG_FIELDS}

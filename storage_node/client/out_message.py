"""A message to produce, as the clients take it: bytes, text, an ``OutMessage`` or a dict in
the JSON API's message shape, normalized and checked as the node checks a JSON message."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage_node.errors import InvalidArgument, InvalidBatch
from storage_node.formats.limits import check_key
from storage_node.wire.message_json import headers_from_json


@dataclass
class OutMessage:
    """A message to produce, normalized from what callers pass."""

    value: bytes
    key: str | None = None
    tag: str | None = None
    msg_id: str | None = None
    timestamp: int | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()  # in order; names may repeat


MESSAGE_FIELDS = (
    "value",
    "value_base64",
    "key",
    "tag",
    "msg_id",
    "timestamp",
    "partition",
    "headers",
    "headers_base64",
)


def _text_field(item: Mapping[str, Any], name: str, index: int) -> str | None:
    value = item.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidBatch(
            f"message {index}: {name!r} must be a string, not {type(value).__name__}",
            index=index,
            field=name,
        )
    return value


def _int_field(item: Mapping[str, Any], name: str, index: int, what: str) -> int | None:
    value = item.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidBatch(
            f"message {index}: {name!r} must be {what}, not {value!r}", index=index, field=name
        )
    return value


def _value_of(item: Mapping[str, Any], index: int) -> bytes:
    text, encoded = item.get("value"), item.get("value_base64")
    if (text is None) == (encoded is None):
        raise InvalidBatch(
            f"message {index}: needs exactly one of 'value' and 'value_base64'", index=index
        )
    if encoded is not None:
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise InvalidBatch(
                f"message {index}: 'value_base64' is not valid base64",
                index=index,
                field="value_base64",
            ) from None
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, bytes | bytearray | memoryview):
        return bytes(text)
    raise InvalidBatch(
        f"message {index}: 'value' must be text or bytes, not {type(text).__name__}",
        index=index,
        field="value",
    )


def _headers_of(item: Mapping[str, Any], index: int) -> tuple[tuple[str, bytes | None], ...]:
    """A dict message's headers: ``headers`` as (name, bytes, str or None) pairs, or the
    JSON API's text / ``headers_base64`` shapes."""
    given = item.get("headers")
    if isinstance(given, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[1], bytes | None)
        for p in given
    ):
        pairs = tuple((p[0], p[1]) for p in given)
        if all(isinstance(name, str) for name, _ in pairs):
            return pairs
    try:
        return headers_from_json(dict(item))
    except ValueError as exc:
        raise InvalidBatch(f"message {index}: {exc}", index=index, field="headers") from None


def to_out_message(item: Any, index: int = 0) -> OutMessage:
    """Accept bytes, str, an OutMessage or a dict in the JSON API's message shape, checked
    as the node checks a JSON message: an unknown field or a field of the wrong type is an
    ``InvalidBatch`` naming message ``index`` and the field (nothing is dropped silently)."""
    if isinstance(item, OutMessage):
        check_key(item.key, index)
        return item
    if isinstance(item, bytes | bytearray | memoryview):
        return OutMessage(bytes(item))
    if isinstance(item, str):
        return OutMessage(item.encode("utf-8"))
    if isinstance(item, Mapping):
        unknown = sorted(str(k) for k in item if k not in MESSAGE_FIELDS)
        if unknown:
            raise InvalidBatch(
                f"message {index}: unknown field {unknown[0]!r} "
                f"(a message has {', '.join(MESSAGE_FIELDS)})",
                index=index,
                field=unknown[0],
            )
        key = _text_field(item, "key", index)
        check_key(key, index)
        return OutMessage(
            _value_of(item, index),
            key,
            _text_field(item, "tag", index),
            _text_field(item, "msg_id", index),
            _int_field(item, "timestamp", index, "ms since epoch (an integer)"),
            _int_field(item, "partition", index, "a partition number (an integer >= 0)"),
            _headers_of(item, index),
        )
    raise InvalidArgument(f"cannot send a message of type {type(item).__name__}")


__all__ = ["MESSAGE_FIELDS", "OutMessage", "to_out_message"]

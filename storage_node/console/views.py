"""How values are shown and read back: times, message IDs decoded, bodies as text, pretty
JSON or hex (capped: a body is attacker-controlled and may be megabytes), time filters."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from storage_node.errors import InvalidArgument
from storage_node.formats.message_id import MS_PER_HOUR, parse_msg_id
from storage_node.wire.message_json import headers_from_json, message_fields

BODY_CAP = 64 * 1024  # bytes of a body shown on a page; the rest through /messages/{id}/raw
VIEWS = ("text", "json", "hex")


@dataclass(frozen=True)
class Message:
    """A message as the HTTP API answers it (wire/message_json.py), its body as bytes."""

    topic: str
    partition: int
    offset: int
    key: str | None
    tag: str | None
    msg_id: str
    timestamp: int
    store_timestamp: int
    value: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


def message_of(doc: dict[str, Any]) -> Message:
    """A message as the node answers it, its headers as text (``headers_of``)."""
    return Message(**message_fields(doc), headers=headers_of(doc))


def headers_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """A message's headers (Kafka record headers) as (name, shown value) pairs, read from
    the node's JSON (``headers``, or ``headers_base64`` when a value is not UTF-8): a UTF-8
    value as its text, any other as ``hex:`` and its bytes in hex, a null value as empty.
    Shown as text: they are whoever produced them. A shape the node never sends shows
    none."""
    try:
        pairs = headers_from_json(doc)
    except ValueError:
        return []
    out = []
    for name, value in pairs:
        try:
            shown = "" if value is None else value.decode("utf-8")
        except UnicodeDecodeError:
            shown = "hex: " + value.hex(" ") if value is not None else ""
        out.append((name, shown))
    return out


def fmt_ms(ms: int | None) -> str:
    """A store or born time (ms since the epoch) as UTC with milliseconds."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def parse_time(name: str, text: str | None) -> int | None:
    """A time filter: milliseconds since the epoch, or an ISO 8601 date and time (UTC when
    it names no zone, as a browser's datetime-local field sends it)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.isdigit() and len(text) <= 16:
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name} must be a date and time (2026-11-26T19:30:00Z) or milliseconds since "
            f"the epoch, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    if ms < 0:
        raise InvalidArgument(f"{name} is before 1970: {text!r}")
    return ms


def decode_msg_id(msg_id: str) -> dict[str, str]:
    """What a message ID encodes (formats/message_id.py): producing app, producer IPv4, the
    hour of its index file and the sequence number in it."""
    mid = parse_msg_id(msg_id)
    return {
        "app": mid.app,
        "producer IP": socket.inet_ntoa(mid.ip.to_bytes(4, "big")),
        "hour": fmt_ms(mid.hour * MS_PER_HOUR)[:13] + ":00 UTC",
        "sequence": str(mid.seq),
    }


@dataclass(frozen=True)
class Body:
    """A body as one view shows it: the text, whether it was cut, and why a view failed."""

    view: str
    text: str
    size: int
    cut: bool
    note: str = ""


def body_view(value: bytes, view: str) -> Body:
    """The first BODY_CAP bytes of a body as text (invalid UTF-8 replaced, said so),
    pretty JSON (falls back to text, saying why) or a hex dump."""
    shown = value[:BODY_CAP]
    cut = len(value) > BODY_CAP
    if view == "hex":
        lines = []
        for at in range(0, len(shown), 16):
            row = shown[at : at + 16]
            text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
            lines.append(f"{at:08x}  {row.hex(' '):<47}  {text}")
        return Body("hex", "\n".join(lines), len(value), cut)
    note = ""
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        text = shown.decode("utf-8", errors="replace")
        note = "the body is not valid UTF-8: undecodable bytes are shown as \ufffd (see hex)"
    if view == "json":
        if cut:
            return Body("text", text, len(value), cut, "the body is too large to pretty-print")
        try:
            doc: Any = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            return Body("text", text, len(value), cut, f"the body is not JSON: {exc}")
        return Body("json", json.dumps(doc, indent=2, ensure_ascii=False), len(value), cut)
    return Body("text", text, len(value), cut, note)


def default_view(value: bytes) -> str:
    """JSON when the body parses as JSON, hex when it is not UTF-8, else text."""
    if len(value) <= BODY_CAP:
        try:
            json.loads(value)
            return "json"
        except (ValueError, UnicodeDecodeError):
            pass
    try:
        value[:BODY_CAP].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < BODY_CAP - 4:  # not just a character cut at the cap
            return "hex"
    return "text"


def row(m: Message) -> dict[str, Any]:
    """A message as a line of a result table (a short preview of its body)."""
    preview = m.value[:120].decode("utf-8", errors="replace")
    return {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "key": m.key,
        "tag": m.tag,
        "msg_id": m.msg_id,
        "stored": fmt_ms(m.store_timestamp),
        "born": fmt_ms(m.timestamp),
        "size": len(m.value),
        "preview": preview + ("…" if len(m.value) > 120 else ""),
    }

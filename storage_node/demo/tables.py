"""How the demo shows what it found: small aligned tables and times a person reads
(``2026-11-26 18:10:03.120 UTC``) instead of JSON strings and raw epoch milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

VALUE_WIDTH = 60


def human_ms(ms: int | None) -> str:
    """Epoch milliseconds as a UTC date and time to the millisecond ("-" for None)."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a table: a header, then one line per row, columns padded to their widest
    cell (the last column is not padded). "(none)" for no rows."""
    if not rows:
        return ["(none)"]
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [v.ljust(w) for v, w in zip(values[:-1], widths[:-1], strict=True)]
        return "  ".join([*padded, values[-1]]).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]


def short(text: str | None, width: int = VALUE_WIDTH) -> str:
    if text is None:
        return "-"
    return text if len(text) <= width else text[: width - 3] + "..."


MESSAGE_HEADERS = ("PART", "OFFSET", "KEY", "TAG", "STORED", "VALUE")


def message_rows(messages: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """One table row per message: where it is, key, tag, store time and the start of its
    value (the message ID is long: the demo names it where it is used)."""
    return [
        [
            m.get("partition"),
            m.get("offset"),
            m.get("key"),
            m.get("tag"),
            human_ms(m.get("store_timestamp")),
            short(m.get("value")),
        ]
        for m in messages
    ]

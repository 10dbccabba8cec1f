"""The one rule for reading a JSON-lines input file, shared by ``msgstore produce`` and the
Spark ingest job (spark/jobs/ingest.py), so one file gives the same messages either way:

- a line ends at ``\\n``; a ``\\r`` before it is part of the line end (CRLF files), not data;
- a UTF-8 byte order mark at the start of a line (an editor puts one before the first) is
  not data (JSON does not allow one, so no valid line loses anything);
- a line is JSON as Spark's JSON functions read it: control characters inside strings (a
  literal tab) are accepted; the line is stored byte for byte (less its line end);
- a born time field is epoch milliseconds (an integer, or digits in a string) or an ISO 8601
  date/time; one without a zone is UTC.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

UTF8_BOM = b"\xef\xbb\xbf"


def line_content(raw: bytes, first: bool = False) -> bytes:
    """A line's data: without the ``\\r`` of a CRLF line end, and without the byte order
    mark when it is the file's ``first`` line."""
    if first and raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM) :]
    return raw[:-1] if raw.endswith(b"\r") else raw


def load_json(text: str) -> Any:
    """The JSON document of a line (ValueError when it is not JSON)."""
    return json.loads(text, strict=False)


def born_ms(value: Any) -> int:
    """A born time in epoch ms from a field's value; ValueError saying what is accepted."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return int(moment.timestamp() * 1000)
    raise ValueError("must be epoch milliseconds or an ISO 8601 date/time")

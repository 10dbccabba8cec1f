"""Client side of the multi-partition fetch: the request path and the decoded answer."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from storage_node.wire.batch_codec import CONTENT_TYPE
from storage_node.wire.fetch_codec import decode_fetch_answer as _decode
from storage_node.wire.fetch_codec import fetch_request
from storage_node.wire.read_answer import MalformedAnswer, ReadColumns

__all__ = ["FetchAnswer", "decode_fetch_answer", "fetch_path", "fetch_request"]


def fetch_path(topic: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/fetch"


@dataclass
class FetchAnswer:
    """One page (``ReadColumns``, its ``next_offset`` where to continue) per partition."""

    pages: dict[int, ReadColumns]

    def __len__(self) -> int:
        return sum(len(p) for p in self.pages.values())


def decode_fetch_answer(content_type: str | None, body: bytes) -> FetchAnswer:
    media = (content_type or "").split(";")[0].strip().lower()
    if media != CONTENT_TYPE:
        raise MalformedAnswer(f"asked for {CONTENT_TYPE} but the node answered {media or 'none'}")
    return FetchAnswer(_decode(body))

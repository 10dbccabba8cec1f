"""Pinned ranges: the few bytes of an uploaded file needed to open it, kept in its manifest.

Opening an uploaded file reads its header (and, for a compressed segment, its block index and
footer). Keeping those ranges in the local manifest lets a node start, recover and list its
files while the object store is unreachable; only reads of message bytes need the store.
Manifests written before pins existed simply have none, and every read goes to the store.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from storage_node.backend.objectstore import ObjectStore
from storage_node.formats import compressed, key_index_compacted


def pinned_ranges(kind: str, path: str) -> list[list[int | str]]:
    """``[[offset, base64 bytes], ...]`` of the local file at ``path`` about to be uploaded."""
    with open(path, "rb") as fh:
        data = fh.read()
    if kind == "segment":
        head = compressed.HEADER.size
        footer = compressed.FOOTER.size
        index_off = compressed.FOOTER.unpack(data[-footer:])[0] if len(data) >= footer else 0
        pins = [(0, data[:head]), (index_off, data[index_off:])]
    else:
        pins = [(0, data[: key_index_compacted.HEADER.size])]
    return [[off, base64.b64encode(chunk).decode("ascii")] for off, chunk in pins if chunk]


def pinned_reader(manifest: dict, objects: ObjectStore, key: str) -> Callable[[int, int], bytes]:
    """A ranged-read function serving pinned ranges locally and the rest from the store."""
    pins = [(int(off), base64.b64decode(text)) for off, text in manifest.get("pinned") or []]

    def read(offset: int, length: int) -> bytes:
        for start, chunk in pins:
            if start <= offset and offset + length <= start + len(chunk):
                return chunk[offset - start : offset - start + length]
        return objects.get_range(key, offset, length)

    return read

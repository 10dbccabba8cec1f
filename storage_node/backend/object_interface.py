"""The object-store interface of the uploaded tier (put, ranged get, delete, list) and the
key rule every backend applies; the backends themselves are in objectstore.py and s3.py."""

from __future__ import annotations

from abc import ABC, abstractmethod

from storage_node.errors import InvalidArgument


class ObjectStore(ABC):
    """What the lifecycle worker and the uploaded-file readers need from a bucket."""

    @abstractmethod
    def put(self, key: str, data: bytes | str) -> None:
        """Store ``data`` (bytes, or a local file path) under ``key``, replacing any old one."""

    @abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes ``[start, start+length)`` of the object (shorter at its end)."""

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def size(self, key: str) -> int: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]: ...


def check_key(key: str) -> str:
    """``key`` if it is a relative ``/``-separated name without empty, ``.`` or ``..`` parts."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument(f"invalid object key {key!r}")
    return key

"""Object stores for the uploaded tier: the directory backend, and ``open_object_store``,
which picks a backend by URL (the interface is in object_interface.py).

The directory backend is the embedded default (and what tests run against); the S3 backend
serves clusters. Keys are ``/``-separated relative names; the directory backend refuses keys
that would escape its root.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from storage_node.backend.files import atomic_write, ensure_dir, pread_exact, remove_file
from storage_node.backend.object_interface import ObjectStore, check_key
from storage_node.errors import InvalidArgument, NotFound


class DirObjectStore(ObjectStore):
    """Objects as files under a root directory; writes are atomic renames."""

    def __init__(self, root: str) -> None:
        self.root = ensure_dir(os.path.abspath(root))

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def put(self, key: str, data: bytes | str) -> None:
        path = self._path(key)
        ensure_dir(os.path.dirname(path))
        if isinstance(data, str):
            with open(data, "rb") as src:
                atomic_write(path, iter(lambda: src.read(1 << 20), b""))
        else:
            atomic_write(path, data)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NotFound(f"object {key!r} not found") from exc
        try:
            return pread_exact(fd, length, start)
        finally:
            os.close(fd)

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError as exc:
            raise NotFound(f"object {key!r} not found") from exc

    def size(self, key: str) -> int:
        try:
            return os.path.getsize(self._path(key))
        except FileNotFoundError as exc:
            raise NotFound(f"object {key!r} not found") from exc

    def delete(self, key: str) -> None:
        remove_file(self._path(key))

    def list(self, prefix: str = "") -> list[str]:
        out = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(".tmp"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), self.root).replace(os.sep, "/")
                if rel.startswith(prefix):
                    out.append(rel)
        return sorted(out)


def open_object_store(url: str) -> ObjectStore:
    """``s3://bucket/prefix`` → S3; a path or ``file://path`` → directory."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        from storage_node.backend.s3 import S3ObjectStore  # boto3 only when S3 is used

        return S3ObjectStore.from_url(url)
    if parsed.scheme == "file":
        return DirObjectStore(parsed.path)
    if parsed.scheme in ("", None):
        return DirObjectStore(url)
    raise InvalidArgument(f"unsupported object store URL scheme {parsed.scheme!r}")

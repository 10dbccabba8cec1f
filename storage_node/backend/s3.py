"""S3 backend of the object-store interface: the uploaded tier of nodes on a cluster.

Selected by an ``s3://bucket/prefix`` URL (``open_object_store``). Credentials and region
come from boto3's usual chain: the ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_DEFAULT_REGION`` environment variables (on Kubernetes, a Secret mounted as env), a
profile, or the pod's web identity. ``AWS_ENDPOINT_URL`` (or ``MSGSTORE_S3_ENDPOINT``) points
it at any S3-compatible server such as MinIO; path-style addressing is used there because
such servers rarely have per-bucket DNS names.

Failures keep their meaning for the lifecycle worker: a missing object is ``NotFound``, an
unreachable or failing server is ``Unavailable`` (the worker keeps the local file and tries
again later), a malformed URL or key is ``InvalidArgument``. Timeouts are short and retries
few, so an unreachable store delays uploads instead of stalling a worker for minutes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlparse

from storage_node.backend.object_interface import ObjectStore
from storage_node.backend.object_interface import check_key as check_object_key
from storage_node.errors import InvalidArgument, NotFound, Unavailable

# S3's rules for bucket names (3-63 chars, lowercase letters, digits, dots and hyphens).
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_MULTIPART_THRESHOLD = 64 << 20


def parse_s3_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``s3://bucket/some/prefix?endpoint=http://host:9000&region=r`` → bucket, prefix, options."""
    parsed = urlparse(url)
    if parsed.scheme != "s3":
        raise InvalidArgument(f"not an s3:// URL: {url!r}")
    bucket = parsed.netloc
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidArgument(
            f"invalid S3 bucket name {bucket!r} in {url!r}: 3-63 lowercase letters, digits, "
            "dots or hyphens"
        )
    prefix = parsed.path.strip("/")
    if prefix:
        check_object_key(prefix)
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(options) - {"endpoint", "region"}
    if unknown:
        raise InvalidArgument(f"unknown S3 URL options {sorted(unknown)} in {url!r}")
    return bucket, prefix, options


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class S3ObjectStore(ObjectStore):
    """Objects under ``prefix/`` in one S3 bucket; every put is a whole-object replace."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        max_attempts: int = 3,
    ) -> None:
        import boto3  # imported lazily: only nodes with S3 tiering pay for it
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint_url = (
            endpoint_url
            or os.environ.get("MSGSTORE_S3_ENDPOINT")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )
        config = Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            s3={"addressing_style": "path" if endpoint_url else "auto"},
        )
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )
        self._transfer = TransferConfig(multipart_threshold=_MULTIPART_THRESHOLD, use_threads=False)

    @classmethod
    def from_url(cls, url: str) -> S3ObjectStore:
        bucket, prefix, options = parse_s3_url(url)
        return cls(
            bucket, prefix, endpoint_url=options.get("endpoint"), region=options.get("region")
        )

    def __repr__(self) -> str:
        return f"S3ObjectStore(s3://{self.bucket}/{self.prefix})"

    def _key(self, key: str) -> str:
        check_object_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _translate(self, exc: Exception, key: str, action: str) -> Exception:
        """botocore errors → the typed errors the store layer acts on."""
        from botocore.exceptions import BotoCoreError, ClientError

        code = _error_code(exc)
        if code in _MISSING_CODES:
            return NotFound(f"object {key!r} not found in s3://{self.bucket}/{self.prefix}")
        if isinstance(exc, ClientError | BotoCoreError):
            return Unavailable(
                f"S3 {action} of {key!r} in bucket {self.bucket!r} failed: {code or exc}",
                backend="s3",
            )
        return exc

    def _call(self, action: str, key: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except Exception as exc:
            raise self._translate(exc, key, action) from exc

    def put(self, key: str, data: bytes | str) -> None:
        full = self._key(key)
        if isinstance(data, str):
            self._call(
                "upload",
                key,
                self.client.upload_file,
                Filename=data,
                Bucket=self.bucket,
                Key=full,
                Config=self._transfer,
            )
        else:
            self._call("put", key, self.client.put_object, Bucket=self.bucket, Key=full, Body=data)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise InvalidArgument(f"invalid range start={start} length={length}")
        if length == 0:
            return b""
        try:
            resp = self.client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{start + length - 1}"
            )
        except Exception as exc:
            if _error_code(exc) == "InvalidRange":  # start at or past the end: nothing there
                self.size(key)  # still NotFound when the object itself is missing
                return b""
            raise self._translate(exc, key, "ranged get") from exc
        return self._read_body(resp, key)

    def _read_body(self, resp: Mapping[str, Any], key: str) -> bytes:
        try:
            return resp["Body"].read()
        except Exception as exc:
            raise self._translate(exc, key, "read") from exc

    def get(self, key: str) -> bytes:
        resp = self._call(
            "get", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key)
        )
        return self._read_body(resp, key)

    def size(self, key: str) -> int:
        resp = self._call(
            "head", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key)
        )
        return int(resp["ContentLength"])

    def delete(self, key: str) -> None:
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def list(self, prefix: str = "") -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        out: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base + prefix
            )
            for page in pages:
                out.extend(obj["Key"][len(base) :] for obj in page.get("Contents", []))
        except Exception as exc:
            raise self._translate(exc, prefix or "/", "list") from exc
        return sorted(out)

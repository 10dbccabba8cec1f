"""The S3 object-store backend against a real MinIO server: the same contract as the
directory backend (put, ranged get, get, size, list, delete), typed errors, and URLs."""

from __future__ import annotations

import os

import pytest

from storage_node.backend.objectstore import DirObjectStore, open_object_store
from storage_node.backend.s3 import S3ObjectStore, parse_s3_url
from storage_node.errors import InvalidArgument, NotFound, Unavailable


@pytest.fixture
def s3_env(minio_server, monkeypatch):
    """Credentials and endpoint the way a pod gets them: environment variables."""
    for key, value in minio_server.env().items():
        monkeypatch.setenv(key, value)
    return minio_server


def make_store(server, bucket: str, prefix: str = "tier") -> S3ObjectStore:
    server.create_bucket(bucket)
    store = open_object_store(f"s3://{bucket}/{prefix}")
    assert isinstance(store, S3ObjectStore)
    return store


def test_put_get_ranges_size_and_list(s3_env, tmp_path):
    store = make_store(s3_env, "tier-basic")
    payload = os.urandom(200_000)
    store.put("commitlog/00000000000000000000", payload)
    src = tmp_path / "index-file"
    src.write_bytes(b"I" * 5000)
    store.put("index/1700000000000", str(src))  # a local path uploads the file's bytes

    assert store.get("commitlog/00000000000000000000") == payload
    assert store.size("commitlog/00000000000000000000") == len(payload)
    assert store.get_range("commitlog/00000000000000000000", 12345, 100) == payload[12345:12445]
    # a range running past the end is cut at the end; one starting there is empty
    assert store.get_range("commitlog/00000000000000000000", 199_990, 50) == payload[199_990:]
    assert store.get_range("commitlog/00000000000000000000", 200_000, 10) == b""
    assert store.get_range("commitlog/00000000000000000000", 5, 0) == b""
    assert store.get("index/1700000000000") == b"I" * 5000

    assert store.list() == ["commitlog/00000000000000000000", "index/1700000000000"]
    assert store.list("index/") == ["index/1700000000000"]
    # keys live under the URL's prefix in the bucket
    raw = s3_env.s3_client().list_objects_v2(Bucket="tier-basic")["Contents"]
    assert sorted(o["Key"] for o in raw) == [
        "tier/commitlog/00000000000000000000",
        "tier/index/1700000000000",
    ]

    store.put("commitlog/00000000000000000000", b"replaced")
    assert store.get("commitlog/00000000000000000000") == b"replaced"
    store.delete("commitlog/00000000000000000000")
    store.delete("commitlog/00000000000000000000")  # deleting twice is fine
    assert store.list() == ["index/1700000000000"]


def test_same_answers_as_the_directory_backend(s3_env, tmp_path):
    s3 = make_store(s3_env, "tier-parity", prefix="")
    local = DirObjectStore(str(tmp_path / "objects"))
    blob = os.urandom(65_536)
    for store in (s3, local):
        store.put("a/b/c", blob)
        store.put("a/d", b"xyz")
    for start, length in [(0, 1), (100, 1000), (65_000, 10_000), (65_535, 1)]:
        assert s3.get_range("a/b/c", start, length) == local.get_range("a/b/c", start, length)
    assert s3.list() == local.list() == ["a/b/c", "a/d"]
    assert s3.list("a/b") == local.list("a/b")
    assert s3.size("a/d") == local.size("a/d") == 3


def test_missing_objects_are_not_found(s3_env):
    store = make_store(s3_env, "tier-missing")
    for call in (
        lambda: store.get("absent"),
        lambda: store.get_range("absent", 0, 10),
        lambda: store.get_range("absent", 10**9, 10),
        lambda: store.size("absent"),
    ):
        with pytest.raises(NotFound):
            call()


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../escape", "a/../b", "a/./b", "trailing/"])
def test_bad_keys_are_refused_and_write_nothing(s3_env, key):
    store = make_store(s3_env, "tier-keys")
    with pytest.raises(InvalidArgument):
        store.put(key, b"data")
    with pytest.raises(InvalidArgument):
        store.get(key)
    assert store.list() == []
    assert s3_env.s3_client().list_objects_v2(Bucket="tier-keys").get("KeyCount", 0) == 0


@pytest.mark.parametrize(
    "url",
    [
        "s3://",
        "s3://UPPER/prefix",
        "s3://ab/prefix",
        "s3://bucket_with_underscore",
        "s3://bucket/../escape",
        "s3://bucket/p?color=blue",
    ],
)
def test_bad_urls_get_clear_errors(url):
    with pytest.raises(InvalidArgument) as err:
        open_object_store(url)
    assert url in err.value.message or "invalid" in err.value.message


def test_url_options_select_endpoint_and_region(minio_server, monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "MSGSTORE_S3_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio_server.secret_key)
    minio_server.create_bucket("tier-options")
    url = f"s3://tier-options/a/b?endpoint={minio_server.endpoint}&region=us-east-1"
    assert parse_s3_url(url) == (
        "tier-options",
        "a/b",
        {"endpoint": minio_server.endpoint, "region": "us-east-1"},
    )
    store = open_object_store(url)
    store.put("k", b"v")
    assert (
        minio_server.s3_client().get_object(Bucket="tier-options", Key="a/b/k")["Body"].read()
        == b"v"
    )


def test_wrong_credentials_and_missing_bucket_are_unavailable(s3_env, monkeypatch):
    store = open_object_store("s3://no-such-bucket/tier")
    with pytest.raises(Unavailable) as err:
        store.put("k", b"v")
    assert "no-such-bucket" in err.value.message

    s3_env.create_bucket("tier-creds")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    with pytest.raises(Unavailable):
        open_object_store("s3://tier-creds/x").put("k", b"v")
    assert s3_env.s3_client().list_objects_v2(Bucket="tier-creds").get("KeyCount", 0) == 0


def test_stopped_server_is_unavailable_then_works_again(s3_env):
    store = make_store(s3_env, "tier-outage")
    store.put("before", b"1")
    s3_env.stop()
    try:
        store_fast = S3ObjectStore("tier-outage", "tier", connect_timeout_s=1, max_attempts=1)
        for call in (
            lambda: store_fast.put("during", b"2"),
            lambda: store_fast.get("before"),
            lambda: store_fast.list(),
        ):
            with pytest.raises(Unavailable):
                call()
    finally:
        s3_env.start()
    assert store.get("before") == b"1"
    assert store.list() == ["before"]

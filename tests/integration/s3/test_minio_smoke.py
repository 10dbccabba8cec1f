"""The MinIO fixture is a real S3 server: ranged reads, errors, restart with data kept."""

from __future__ import annotations

import os

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError


def test_put_then_ranged_get_returns_exact_bytes(minio_server):
    s3 = minio_server.s3_client()
    bucket = minio_server.create_bucket("smoke")
    payload = os.urandom(3 * 1024 * 1024 + 17)
    s3.put_object(Bucket=bucket, Key="segments/0001.log", Body=payload)

    assert s3.head_object(Bucket=bucket, Key="segments/0001.log")["ContentLength"] == len(payload)
    part = s3.get_object(Bucket=bucket, Key="segments/0001.log", Range="bytes=1048570-1048600")
    assert part["ContentRange"] == f"bytes 1048570-1048600/{len(payload)}"
    assert part["Body"].read() == payload[1048570:1048601]
    tail = s3.get_object(Bucket=bucket, Key="segments/0001.log", Range="bytes=-17")
    assert tail["Body"].read() == payload[-17:]
    whole = s3.get_object(Bucket=bucket, Key="segments/0001.log")["Body"].read()
    assert whole == payload


def test_bad_requests_get_clear_errors_and_change_nothing(minio_server):
    s3 = minio_server.s3_client()
    bucket = minio_server.create_bucket("errors")
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")

    with pytest.raises(ClientError) as missing:
        s3.get_object(Bucket=bucket, Key="absent")
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"

    with pytest.raises(ClientError) as beyond:
        s3.get_object(Bucket=bucket, Key="k", Range="bytes=50-60")
    assert beyond.value.response["Error"]["Code"] == "InvalidRange"

    with pytest.raises(ClientError) as no_bucket:
        s3.put_object(Bucket="no-such-bucket", Key="k", Body=b"x")
    assert no_bucket.value.response["Error"]["Code"] == "NoSuchBucket"

    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("k", 10)]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"0123456789"


def test_stopped_server_is_unreachable_and_restart_keeps_data(minio_server):
    s3 = minio_server.s3_client()
    bucket = minio_server.create_bucket("restart")
    s3.put_object(Bucket=bucket, Key="kept", Body=b"still here")

    minio_server.stop()
    with pytest.raises(EndpointConnectionError):
        s3.get_object(Bucket=bucket, Key="kept")

    minio_server.start()
    assert s3.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"still here"

"""Bearer-token auth: 401 without a valid token, 403 for a read-only token writing."""

from __future__ import annotations

import pytest
import requests

TOKEN = "s3cret-token"
READ_TOKEN = "read-only-token"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from tests.integration.node.conftest import NodeProcess

    n = NodeProcess(
        tmp_path_factory.mktemp("secured"),
        {"MSGSTORE_TOKEN": TOKEN, "MSGSTORE_READ_TOKEN": READ_TOKEN},
    )
    n.start()
    yield n
    n.stop()


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_health_and_metrics_stay_open(secured):
    for path in ("/healthz", "/readyz", "/metrics"):
        assert requests.get(secured.url(path)).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{}, bearer("wrong"), {"Authorization": TOKEN}, {"Authorization": "Basic abc"}, bearer("")],
)
def test_missing_or_wrong_token_is_401(secured, headers):
    for method, path in (("GET", "/v1/topics"), ("GET", "/v1/cluster"), ("POST", "/v1/topics")):
        resp = requests.request(
            method, secured.url(path), headers=headers, json={"name": "x", "partitions": 1}
        )
        assert resp.status_code == 401, (method, path)
        assert resp.json()["error"]["code"] == "unauthenticated"
        assert "Bearer" in resp.headers["WWW-Authenticate"]
    assert requests.get(secured.url("/v1/topics"), headers=bearer(TOKEN)).json()["topics"] == []


def test_read_token_reads_but_cannot_write(secured):
    assert (
        requests.post(
            secured.url("/v1/topics"),
            json={"name": "auth-t", "partitions": 1},
            headers=bearer(TOKEN),
        ).status_code
        == 201
    )
    write = requests.post(
        secured.url("/v1/topics/auth-t/messages"),
        json={"messages": [{"value": "x"}]},
        headers=bearer(READ_TOKEN),
    )
    assert write.status_code == 403 and write.json()["error"]["code"] == "forbidden"
    read = requests.get(secured.url("/v1/topics/auth-t"), headers=bearer(READ_TOKEN))
    assert read.status_code == 200
    assert read.json()["partition_offsets"][0]["next_offset"] == 0


def test_client_passes_token_and_raises_typed_errors(secured):
    from storage_node.client import Client, Forbidden, Unauthenticated

    with Client(secured.address, token=TOKEN) as client:
        client.create_topic("auth-c", 2)
        assert len(client.produce("auth-c", [b"a", b"b"])) == 2
    with Client(secured.address, token="nope") as client, pytest.raises(Unauthenticated):
        client.list_topics()
    with Client(secured.address, token=READ_TOKEN) as client:
        with pytest.raises(Forbidden):
            client.produce("auth-c", [b"c"])
        assert (
            sum(p["next_offset"] for p in client.describe_topic("auth-c")["partition_offsets"]) == 2
        )

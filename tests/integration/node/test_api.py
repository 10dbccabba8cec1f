"""The whole single-node API against a real node process: success paths and every error."""

from __future__ import annotations

import base64

import pytest
import requests

from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.wire.batch_codec import CONTENT_TYPE, encode_batch


def create(node, name, partitions=3, **extra):
    return requests.post(
        node.url("/v1/topics"), json={"name": name, "partitions": partitions, **extra}
    )


def offsets(node, topic):
    doc = requests.get(node.url(f"/v1/topics/{topic}")).json()
    return [(p["first_offset"], p["next_offset"]) for p in doc["partition_offsets"]]


def error_code(resp):
    return resp.json()["error"]["code"]


def test_health_ready_metrics(node):
    assert requests.get(node.url("/healthz")).json()["status"] == "ok"
    ready = requests.get(node.url("/readyz"))
    assert ready.status_code == 200 and ready.json()["ready"] is True
    metrics = requests.get(node.url("/metrics"))
    assert metrics.status_code == 200
    assert "msgstore_http_requests_total" in metrics.text
    assert "msgstore_store_ready 1.0" in metrics.text
    # what only grows is a counter (rate() works), levels are gauges
    assert "# TYPE msgstore_store_appended_messages_total counter" in metrics.text
    assert "msgstore_store_appended_messages_total " in metrics.text
    assert "# TYPE msgstore_store_log_fsyncs_total counter" in metrics.text
    assert "# TYPE msgstore_store_topics gauge" in metrics.text
    assert "# TYPE msgstore_append_durable_seconds histogram" in metrics.text


def test_topic_create_repeat_conflict_and_list(node):
    first = create(node, "orders-a", 4, compression="none", retention_hours=24)
    assert first.status_code == 201
    assert first.json()["owners"] == ["node-0"] * 4
    assert create(node, "orders-a", 4, compression="none", retention_hours=24).status_code == 200
    conflict = create(node, "orders-a", 5, compression="none", retention_hours=24)
    assert conflict.status_code == 409 and error_code(conflict) == "topic_conflict"
    names = [t["name"] for t in requests.get(node.url("/v1/topics")).json()["topics"]]
    assert "orders-a" in names
    detail = requests.get(node.url("/v1/topics/orders-a")).json()
    assert detail["partitions"] == 4 and len(detail["partition_offsets"]) == 4


@pytest.mark.parametrize(
    "body",
    [
        {"name": "..", "partitions": 1},
        {"name": ".", "partitions": 1},
        {"name": "a/b", "partitions": 1},
        {"name": "x" * 201, "partitions": 1},
        {"name": "ok", "partitions": 0},
        {"name": "ok", "partitions": MAX_PARTITIONS + 1},
        {"name": "ok", "partitions": "3"},
        {"name": "ok", "partitions": 1, "compression": "zstd"},
        {"name": "ok", "partitions": 1, "retention_hours": -1},
        {"name": "ok", "partitions": 1, "surprise": True},
        {"partitions": 1},
        [],
    ],
)
def test_bad_topic_bodies_are_400_and_create_nothing(node, body):
    resp = requests.post(node.url("/v1/topics"), json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"]
    names = [t["name"] for t in requests.get(node.url("/v1/topics")).json()["topics"]]
    assert "ok" not in names


@pytest.mark.parametrize(
    "path, body, code, names",
    [
        ("/v1/topics", {"name": "ok", "partitions": True}, "invalid_argument", "partitions"),
        ("/v1/topics", {"name": "ok", "partitions": 1, "colour": 1}, "invalid_argument", "colour"),
        ("/v1/topics", {"name": "../x", "partitions": 1}, "invalid_name", "../x"),
        ("/v1/topics", [1], "invalid_argument", "JSON object"),
        (
            "/v1/topics/named/messages",
            {"messages": [{"value": "a"}, {"value": "b", "timestamp": "now"}]},
            "invalid_batch",
            "messages[1].timestamp",
        ),
        (
            "/v1/topics/named/messages",
            {"messages": [{"value_base64": "***"}]},
            "invalid_batch",
            "messages[0].value_base64",
        ),
        (
            "/v1/consumer-groups/g/offsets",
            {"topic": "named", "partition": 0, "offset": "1"},
            "invalid_argument",
            "offset",
        ),
        ("/v1/admin/drain", {"draining": 1}, "invalid_argument", "draining"),
    ],
)
def test_bad_bodies_name_the_field(node, path, body, code, names):
    """Bodies are checked by the request models: a 400 in the usual error shape whose
    message names the bad field, and nothing changes."""
    create(node, "named", 1)
    before = offsets(node, "named")
    resp = requests.post(node.url(path), json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and names in error["message"], error
    assert offsets(node, "named") == before
    assert requests.get(node.url("/readyz")).json()["draining"] is False
    assert requests.get(node.url("/v1/consumer-groups/g/offsets")).json()["offsets"] == {}


def test_not_json_body_is_400(node):
    resp = requests.post(
        node.url("/v1/topics"), data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400 and error_code(resp) == "invalid_argument"


def test_produce_json_then_read_lookup_get(node):
    assert create(node, "events", 2).status_code == 201
    body = {
        "messages": [
            {"key": "k1", "tag": "created", "value": "hello", "timestamp": 1_700_000_000_000},
            {"key": "k1", "tag": "paid", "value_base64": base64.b64encode(b"\xff\x00bin").decode()},
            {"value": "to-p1", "partition": 1, "msg_id": "shop-0a010101-472222-7"},
        ]
    }
    resp = requests.post(node.url("/v1/topics/events/messages"), json=body)
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert len(results) == 3
    assert results[2]["partition"] == 1 and results[2]["msg_id"] == "shop-0a010101-472222-7"
    p = results[0]["partition"]
    assert results[1]["partition"] == p  # same key, same partition
    read = requests.get(
        node.url(f"/v1/topics/events/partitions/{p}/messages"), params={"offset": 0}
    ).json()
    values = {m["msg_id"]: m for m in read["messages"]}
    first = values[results[0]["msg_id"]]
    assert (
        first["value"] == "hello"
        and first["key"] == "k1"
        and first["timestamp"] == 1_700_000_000_000
    )
    second = values[results[1]["msg_id"]]
    assert base64.b64decode(second["value_base64"]) == b"\xff\x00bin" and "value" not in second
    tagged = requests.get(
        node.url(f"/v1/topics/events/partitions/{p}/messages"), params={"offset": 0, "tag": "paid"}
    ).json()
    assert [m["tag"] for m in tagged["messages"]] == ["paid"]
    lookup = requests.get(node.url("/v1/topics/events/keys/k1")).json()
    assert [m["msg_id"] for m in lookup["messages"]] == [results[1]["msg_id"], results[0]["msg_id"]]
    assert lookup["limit_reached"] is False
    limited = requests.get(node.url("/v1/topics/events/keys/k1"), params={"max": 1}).json()
    assert len(limited["messages"]) == 1 and limited["limit_reached"] is True
    got = requests.get(node.url("/v1/messages/shop-0a010101-472222-7")).json()
    assert got["value"] == "to-p1" and got["partition"] == 1


def test_produce_binary_batch(node):
    assert create(node, "bin", 3).status_code == 201
    values = [f"v{i}".encode() * 10 for i in range(500)]
    keys = [f"key-{i % 7}" for i in range(500)]
    body = encode_batch(values, keys=keys, producer_id="p-bin", sequence=0)
    resp = requests.post(
        node.url("/v1/topics/bin/messages"), data=body, headers={"Content-Type": CONTENT_TYPE}
    )
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["count"] == 500 and len(set(doc["msg_ids"])) == 500
    assert sum(n for _, n in offsets(node, "bin")) == 500
    # the same (producer id, sequence) again: the first answer, nothing written twice
    again = requests.post(
        node.url("/v1/topics/bin/messages"), data=body, headers={"Content-Type": CONTENT_TYPE}
    )
    assert again.json() == doc
    assert sum(n for _, n in offsets(node, "bin")) == 500


def test_idempotent_json_retry(node):
    create(node, "idem", 1)
    body = {"messages": [{"value": "once"}], "producer_id": "prod-1", "sequence": 5}
    a = requests.post(node.url("/v1/topics/idem/messages"), json=body).json()
    b = requests.post(node.url("/v1/topics/idem/messages"), json=body).json()
    assert a == b
    assert offsets(node, "idem") == [(0, 1)]


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": [{"key": "no value"}]},
        {"messages": [{"value": "a", "value_base64": "YQ=="}]},
        {"messages": [{"value_base64": "***"}]},
        {"messages": [{"value": 5}]},
        {"messages": [{"value": "ok"}, {"value": "bad", "partition": 99}]},
        {"messages": [{"value": "ok"}, {"value": "bad", "partition": -1}]},
        {"messages": [{"value": "ok"}, {"value": "x", "timestamp": "now"}]},
        {"messages": [{"value": "ok", "color": "red"}]},
        {"messages": [{"value": "ok"}], "producer_id": "p"},
        {"messages": "nope"},
    ],
)
def test_bad_batches_are_400_and_write_nothing(node, body):
    create(node, "strict", 2)
    before = offsets(node, "strict")
    resp = requests.post(node.url("/v1/topics/strict/messages"), json=body)
    assert resp.status_code == 400, resp.text
    assert error_code(resp) in ("invalid_batch", "invalid_argument")
    assert offsets(node, "strict") == before


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"MSB1",
        b"XXXX" + bytes(16),
        encode_batch([b"a", b"b"])[:-1],
        encode_batch([b"a", b"b"]) + b"extra",
    ],
)
def test_malformed_binary_batches_are_400(node, body):
    create(node, "strictbin", 1)
    before = offsets(node, "strictbin")
    resp = requests.post(
        node.url("/v1/topics/strictbin/messages"), data=body, headers={"Content-Type": CONTENT_TYPE}
    )
    assert resp.status_code == 400 and error_code(resp) == "invalid_batch", resp.text
    assert offsets(node, "strictbin") == before


def test_oversized_message_is_413_and_writes_nothing(node):
    create(node, "big", 1)
    body = {"messages": [{"value": "small"}, {"value": "x" * 70_000}]}
    resp = requests.post(node.url("/v1/topics/big/messages"), json=body)
    assert resp.status_code == 413 and error_code(resp) == "message_too_large"
    assert offsets(node, "big") == [(0, 0)]


def test_body_over_limit_is_413(node):
    create(node, "huge", 1)
    resp = requests.post(
        node.url("/v1/topics/huge/messages"),
        data=encode_batch([b"y" * 60_000] * 20),
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert resp.status_code == 413 and error_code(resp) == "request_too_large"
    assert offsets(node, "huge") == [(0, 0)]


def test_unsupported_content_type_is_415(node):
    create(node, "ctype", 1)
    resp = requests.post(
        node.url("/v1/topics/ctype/messages"), data=b"x", headers={"Content-Type": "text/plain"}
    )
    assert resp.status_code == 415
    assert offsets(node, "ctype") == [(0, 0)]


def test_unknown_things_are_404(node):
    for path in (
        "/v1/topics/nope",
        "/v1/topics/nope/partitions/0/messages",
        "/v1/topics/nope/keys/k",
        "/v1/messages/app-7f000001-400000-1",
        "/v1/no-such-route",
    ):
        resp = requests.get(node.url(path))
        assert resp.status_code == 404, path
        assert resp.json()["error"]["code"] in ("unknown_topic", "not_found")
    resp = requests.post(node.url("/v1/topics/nope/messages"), json={"messages": [{"value": "x"}]})
    assert resp.status_code == 404 and error_code(resp) == "unknown_topic"


def test_bad_read_parameters_are_400(node):
    create(node, "reads", 2)
    requests.post(
        node.url("/v1/topics/reads/messages"), json={"messages": [{"value": "a", "partition": 0}]}
    )
    base = "/v1/topics/reads/partitions/{}/messages"
    for part, params in (
        (0, {"offset": 5}),
        (0, {"offset": "abc"}),
        (0, {"max_messages": 0}),
        (0, {"offset": 0, "start_time": 1}),
        (7, {}),
        ("x", {}),
    ):
        resp = requests.get(node.url(base.format(part)), params=params)
        assert resp.status_code == 400, (part, params, resp.text)
    assert requests.get(node.url("/v1/messages/not-an-id")).status_code == 400
    resp = requests.get(node.url("/v1/topics/reads/keys/k"), params={"begin": 10, "end": 5})
    assert resp.status_code == 400


def test_the_last_partition_of_the_largest_topic_is_read_over_http(node):
    """The read route takes every partition a topic may have (MAX_PARTITIONS), not only the
    first 1,024 (its bound was left behind when the limit rose)."""
    assert create(node, "wide", MAX_PARTITIONS).status_code == 201
    last = MAX_PARTITIONS - 1
    resp = requests.post(
        node.url("/v1/topics/wide/messages"),
        json={"messages": [{"key": "k", "value": "far", "partition": last}]},
    )
    assert resp.status_code == 200, resp.text
    base = "/v1/topics/wide/partitions/{}/messages"
    read = requests.get(node.url(base.format(last)), params={"offset": 0})
    assert read.status_code == 200, read.text
    assert [m["value"] for m in read.json()["messages"]] == ["far"]
    over = requests.get(node.url(base.format(MAX_PARTITIONS)), params={"offset": 0})
    assert over.status_code == 400, over.text


def test_time_range_read(node):
    create(node, "timed", 1)
    requests.post(
        node.url("/v1/topics/timed/messages"),
        json={"messages": [{"value": f"m{i}"} for i in range(5)]},
    )
    all_msgs = requests.get(node.url("/v1/topics/timed/partitions/0/messages")).json()["messages"]
    stamp = all_msgs[0]["store_timestamp"]
    window = requests.get(
        node.url("/v1/topics/timed/partitions/0/messages"),
        params={"start_time": stamp, "end_time": stamp},
    ).json()
    assert window["messages"] and all(m["store_timestamp"] == stamp for m in window["messages"])
    later = requests.get(
        node.url("/v1/topics/timed/partitions/0/messages"), params={"start_time": stamp + 10**9}
    ).json()
    assert later["messages"] == [] and later["next_offset"] == 5


def test_consumer_group_offsets(node):
    create(node, "grp", 2)
    url = node.url("/v1/consumer-groups/g1/offsets")
    assert requests.post(url, json={"topic": "grp", "partition": 1, "offset": 0}).status_code == 200
    doc = requests.get(url, params={"topic": "grp"}).json()
    assert doc["offsets"] == {"grp": {"1": 0}}
    for body in (
        {"topic": "grp", "partition": 9, "offset": 0},
        {"topic": "grp", "partition": 0, "offset": -1},
        {"topic": "grp", "partition": 0},
        {"topic": "../x", "partition": 0, "offset": 0},
    ):
        assert requests.post(url, json=body).status_code == 400, body
    assert requests.post(
        node.url("/v1/consumer-groups/bad%2Fname/offsets"),
        json={"topic": "grp", "partition": 0, "offset": 0},
    ).status_code in (400, 404)
    assert requests.get(url, params={"topic": "grp"}).json()["offsets"] == {"grp": {"1": 0}}


def test_cluster_files_compact(node):
    create(node, "adm", 1)
    requests.post(
        node.url("/v1/topics/adm/messages"), json={"messages": [{"value": "a", "key": "k"}]}
    )
    cluster = requests.get(node.url("/v1/cluster")).json()
    assert cluster["managed_by"] == "standalone" and cluster["nodes"][0]["address"] == node.address
    assert cluster["topics"]["adm"]["owners"] == ["node-0"]
    report = requests.post(node.url("/v1/admin/compact"))
    assert report.status_code == 200, report.text
    files = requests.get(node.url("/v1/admin/files")).json()["files"]
    assert files and {f["kind"] for f in files} <= {"segment", "key_index"}
    # the key is still found after compaction
    assert len(requests.get(node.url("/v1/topics/adm/keys/k")).json()["messages"]) == 1
    sealed = requests.get(node.url("/v1/admin/sealed"))
    assert sealed.status_code == 200
    assert requests.get(node.url("/v1/admin/files/segment/..")).status_code in (400, 404)
    assert requests.get(node.url("/v1/admin/files/bogus/x")).status_code == 400


def test_drain_gives_503_for_writes(node):
    create(node, "drained", 1)
    assert (
        requests.post(node.url("/v1/admin/drain"), json={"draining": True}).json()["draining"]
        is True
    )
    try:
        resp = requests.post(
            node.url("/v1/topics/drained/messages"), json={"messages": [{"value": "x"}]}
        )
        assert resp.status_code == 503 and error_code(resp) == "unavailable"
        assert resp.headers["Retry-After"] == "1"
        assert requests.get(node.url("/readyz")).status_code == 503
        assert requests.get(node.url("/v1/topics/drained")).status_code == 200  # reads still work
    finally:
        requests.post(node.url("/v1/admin/drain"), json={"draining": False})
    assert offsets(node, "drained") == [(0, 0)]
    assert requests.post(node.url("/v1/admin/drain"), json={"draining": "yes"}).status_code == 400


def test_disk_full_is_507(node_factory):
    n = node_factory("full", env={"MSGSTORE_MIN_FREE_BYTES": str(2**62)})
    resp = requests.post(n.url("/v1/topics"), json={"name": "t", "partitions": 1})
    assert resp.status_code == 507 and error_code(resp) == "disk_full"
    assert requests.get(n.url("/v1/topics")).json()["topics"] == []


def test_openapi_lists_every_route(node):
    doc = requests.get(node.url("/v1/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    from storage_node.server.app import create_app
    from storage_node.server.runtime import NodeRuntime
    from storage_node.server.settings import NodeSettings

    app = create_app(NodeRuntime(NodeSettings(data_dir="unused")))
    served = {
        (route.resource.canonical, route.method)
        for route in app.router.routes()
        if route.method != "HEAD"
    }
    assert served == documented  # the web console is a process of its own (docs/CONSOLE.md)
    assert ("/v1/topics/{topic}/keys/{key}", "GET") in served


def test_a_slow_client_does_not_stall_others(node):
    """A client trickling its body holds only its own request; others' appends complete."""
    import socket

    create(node, "slowpoke", 1)
    slow = socket.create_connection(("127.0.0.1", node.port))
    try:
        slow.sendall(
            b"POST /v1/topics/slowpoke/messages HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"messages": ['
        )
        for i in range(20):
            resp = requests.post(
                node.url("/v1/topics/slowpoke/messages"),
                json={"messages": [{"value": f"{i}"}]},
                timeout=10,
            )
            assert resp.status_code == 200
    finally:
        slow.close()
    assert offsets(node, "slowpoke") == [(0, 20)]

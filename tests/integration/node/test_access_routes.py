"""Users and ACL rules over every HTTP route of a real node (docs/SECURITY.md, "Users and
ACLs"): for each route, a user without the rule it needs gets 403 and changes nothing; the
same user, once given the rule (no restart), succeeds. Super-user routes refuse every user
and the read token's changes; listings show only what a user may describe; a message of a
topic the user may not read answers exactly as an unknown ID."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from storage_node.server.permissions import PERMISSIONS
from tests.integration.node.conftest import NodeProcess
from tests.waiting import wait_until

SUPER = "super-" + "x" * 20
READ_TOKEN = "reader-" + "y" * 20
TOPIC = "acl-data"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Node:
    """A secured node with an access file and helpers to call it as anyone."""

    def __init__(self, proc: NodeProcess, access_file: Path) -> None:
        self.proc = proc
        self.access_file = access_file
        self.names = itertools.count()

    def call(
        self, token: str, method: str, path: str, body: Any = None, params: Any = None
    ) -> requests.Response:
        return requests.request(
            method, self.proc.url(path), json=body, params=params, headers=bearer(token), timeout=30
        )

    def ok(self, method: str, path: str, body: Any = None, params: Any = None) -> Any:
        resp = self.call(SUPER, method, path, body, params)
        assert resp.status_code < 300, resp.text
        return resp.json()

    def new_user(self) -> tuple[str, str]:
        name = f"u{next(self.names)}"
        return name, self.ok("POST", "/v1/users", {"name": name})["token"]

    def grant(self, user: str, operation: str, resource: str, name: str, **extra: str) -> None:
        rule = {"user": user, "operation": operation, "resource": resource, "name": name, **extra}
        self.ok("POST", "/v1/acls", rule)

    def snapshot(self) -> dict[str, Any]:
        """What a refused request must not change: topics, offsets, groups, users, drain."""
        return {
            "topics": self.ok("GET", "/v1/topics"),
            "data": self.ok("GET", f"/v1/topics/{TOPIC}")["partition_offsets"],
            "group": self.ok("GET", "/v1/consumer-groups/g-1/offsets")["offsets"],
            "users": self.ok("GET", "/v1/users"),
            "acls": self.ok("GET", "/v1/acls"),
            "ready": requests.get(self.proc.url("/readyz"), timeout=10).json(),
        }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("acl")
    access = base / "access.json"
    proc = NodeProcess(
        base / "n",
        {
            "MSGSTORE_TOKEN": SUPER,
            "MSGSTORE_READ_TOKEN": READ_TOKEN,
            "MSGSTORE_ACCESS_FILE": str(access),
        },
    )
    proc.start()
    n = Node(proc, access)
    for name, partitions in ((TOPIC, 2), ("acl-del", 1), ("acl-grow", 1), ("other", 1)):
        n.ok("POST", "/v1/topics", {"name": name, "partitions": partitions})
    batch = {"messages": [{"value": f"v{i}", "key": "k", "partition": 0} for i in range(3)]}
    n.ok("POST", f"/v1/topics/{TOPIC}/messages", batch)
    n.ok("POST", "/v1/topics/other/messages", {"messages": [{"value": "secret", "key": "k"}]})
    n.ok("POST", "/v1/consumer-groups/g-1/offsets", {"topic": TOPIC, "partition": 0, "offset": 1})
    n.ok("POST", "/v1/consumer-groups/g-del/offsets", {"topic": TOPIC, "partition": 0, "offset": 1})
    yield n
    proc.stop()


@dataclass(frozen=True)
class Row:
    """One route: the request, and the rules (operation, resource, name) it needs."""

    method: str
    path: str
    needs: tuple[tuple[str, str, str], ...]
    body: Any = None
    ok: int = 200
    params: dict[str, str] = field(default_factory=dict)


ROWS = [
    Row("POST", "/v1/topics", (("create", "topic", "acl-new"),), {"name": "acl-new", "partitions": 1}, 201),
    Row("GET", f"/v1/topics/{TOPIC}", (("describe", "topic", TOPIC),)),
    Row("DELETE", "/v1/topics/acl-del", (("delete", "topic", "acl-del"),)),
    Row("POST", "/v1/topics/acl-grow/partitions", (("create", "topic", "acl-grow"),), {"partitions": 2}),
    Row("POST", f"/v1/topics/{TOPIC}/messages", (("write", "topic", TOPIC),), {"messages": [{"value": "w"}]}),
    Row("GET", f"/v1/topics/{TOPIC}/partitions/0/messages", (("read", "topic", TOPIC),)),
    Row("POST", f"/v1/topics/{TOPIC}/fetch", (("read", "topic", TOPIC),), {"partitions": [{"partition": 0, "offset": 0}]}),
    Row("GET", f"/v1/topics/{TOPIC}/keys/k", (("read", "topic", TOPIC),)),
    Row(
        "POST",
        "/v1/consumer-groups/g-1/offsets",
        (("read", "group", "g-1"), ("read", "topic", TOPIC)),
        {"topic": TOPIC, "partition": 0, "offset": 2},
    ),
    Row("GET", "/v1/consumer-groups/g-1/offsets", (("read", "group", "g-1"),)),
    Row(
        "GET",
        "/v1/consumer-groups/g-1/offsets",
        (("read", "group", "g-1"), ("read", "topic", TOPIC)),
        params={"topic": TOPIC},
    ),
    Row(
        "DELETE",
        "/v1/consumer-groups/g-del/offsets",
        (("delete", "group", "g-del"), ("read", "topic", TOPIC)),
        params={"topic": TOPIC},
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.method} {r.path} {r.params}" for r in ROWS])
def test_a_rule_turns_403_into_success_without_restart(node: Node, row: Row) -> None:
    user, token = node.new_user()
    node.grant(user, "read", "topic", "other")  # a rule, but not one of these
    for count in range(len(row.needs) + 1):  # with no rule, then each one more
        if count:
            node.grant(user, *row.needs[count - 1])
        if count == len(row.needs):
            break
        before = node.snapshot()
        resp = node.call(token, row.method, row.path, row.body, row.params)
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"]["code"] == "forbidden"
        assert node.snapshot() == before
    resp = node.call(token, row.method, row.path, row.body, row.params)
    assert resp.status_code == row.ok, resp.text  # this node applied its own change at once


def test_the_declared_table_covers_every_resource_route() -> None:
    covered = {(r.method, _pattern(r.path)) for r in ROWS}
    resource_routes = {k for k, p in PERMISSIONS.items() if p.kind.value == "resource"}
    assert resource_routes <= covered


def _pattern(path: str) -> str:
    for _m, pattern in PERMISSIONS:
        parts, want = pattern.split("/"), path.split("/")
        if len(parts) == len(want) and all(
            p == w or p.startswith("{") for p, w in zip(parts, want, strict=True)
        ):
            return pattern
    return path


SUPER_ONLY = [
    ("GET", "/v1/admin/files", None),
    ("GET", "/v1/admin/sealed", None),
    ("GET", "/v1/admin/files/segment/00000000000000000000", None),
    ("GET", "/v1/replication/logs/node-0/fetch", None),
    ("GET", "/v1/replication/logs/node-0/epoch-end", None),
    ("GET", "/v1/replication/status", None),
    ("POST", "/v1/admin/compact", None),
    ("POST", "/v1/admin/drain", {"draining": False}),
    ("POST", "/v1/admin/seal", None),
    ("PUT", "/v1/admin/files/segment/00000000000000000000/compacted", None),
    ("POST", "/v1/replication/logs/node-0/fence", None),
    ("PUT", "/v1/replication/routing", {"generation": 1}),
    ("GET", "/v1/users", None),
    ("POST", "/v1/users", {"name": "intruder"}),
    ("DELETE", "/v1/users/u0", None),
    ("GET", "/v1/acls", None),
    ("POST", "/v1/acls", {"user": "u0", "operation": "alter", "resource": "topic", "name": "x"}),
    ("DELETE", "/v1/acls", {"user": "u0", "operation": "read", "resource": "topic", "name": "other"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "body"), SUPER_ONLY, ids=[f"{m} {p}" for m, p, _ in SUPER_ONLY]
)
def test_super_user_routes_refuse_every_user(node: Node, method: str, path: str, body: Any) -> None:
    user, token = node.new_user()
    for resource in ("topic", "group"):  # every rule a user can have
        for operation in ("read", "write", "create", "delete", "describe", "alter"):
            node.grant(user, operation, resource, "a", pattern="prefix")
            node.grant(user, operation, resource, "u", pattern="prefix")
    before = node.snapshot()
    resp = node.call(token, method, path, body)
    assert resp.status_code == 403, resp.text
    as_reader = node.call(READ_TOKEN, method, path, body)
    reader_may = method == "GET" and not path.startswith(("/v1/users", "/v1/acls"))
    assert (as_reader.status_code != 403) == reader_may, as_reader.text
    assert node.snapshot() == before
    assert node.call(SUPER, method, path, body).status_code not in (401, 403)


def test_listings_show_only_what_the_user_may_describe(node: Node) -> None:
    user, token = node.new_user()
    names = lambda: [t["name"] for t in node.call(token, "GET", "/v1/topics").json()["topics"]]  # noqa: E731
    routing = lambda: set(node.call(token, "GET", "/v1/cluster").json()["topics"])  # noqa: E731
    groups = lambda: node.call(token, "GET", "/v1/consumer-groups").json()["groups"]  # noqa: E731
    assert names() == [] and routing() == set() and groups() == []
    node.grant(user, "write", "topic", "acl-", pattern="prefix")  # write implies describe
    assert TOPIC in names() and "other" not in names()
    assert TOPIC in routing() and "other" not in routing()
    node.grant(user, "describe", "group", "g-1")
    assert groups() == ["g-1"]
    # a group's offsets: only of topics the user may read
    node.grant(user, "read", "group", "g-1")
    offsets = lambda: node.call(token, "GET", "/v1/consumer-groups/g-1/offsets").json()["offsets"]  # noqa: E731
    assert offsets() == {}
    node.grant(user, "read", "topic", TOPIC)
    assert set(offsets()) == {TOPIC}
    # every authenticated principal reads the API document
    assert node.call(token, "GET", "/v1/openapi.json").status_code == 200


def test_a_message_of_an_unreadable_topic_answers_as_an_unknown_id(node: Node) -> None:
    secret = node.ok("GET", "/v1/topics/other/keys/k")["messages"][0]["msg_id"]
    visible = node.ok("GET", f"/v1/topics/{TOPIC}/keys/k")["messages"][0]["msg_id"]
    unknown = secret.rsplit("-", 1)[0] + "-999999"
    user, token = node.new_user()
    node.grant(user, "read", "topic", TOPIC)
    got = node.call(token, "GET", f"/v1/messages/{visible}")
    assert got.status_code == 200 and got.json()["topic"] == TOPIC
    hidden = node.call(token, "GET", f"/v1/messages/{secret}")
    missing = node.call(token, "GET", f"/v1/messages/{unknown}")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == _swap(missing.json(), unknown, secret)
    assert node.call(token, "GET", "/v1/topics/other/keys/k").status_code == 403


def _swap(doc: Any, old: str, new: str) -> Any:
    import json

    return json.loads(json.dumps(doc).replace(old, new))


def test_a_revoked_user_is_refused(node: Node) -> None:
    user, token = node.new_user()
    node.grant(user, "read", "topic", TOPIC)
    assert node.call(token, "GET", f"/v1/topics/{TOPIC}").status_code == 200
    node.ok("DELETE", f"/v1/users/{user}")
    resp = node.call(token, "GET", f"/v1/topics/{TOPIC}")
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthenticated"
    assert node.ok("GET", "/v1/acls", params={"user": user})["acls"] == []


def test_a_changed_file_applies_without_restart_and_bad_files_are_ignored(node: Node) -> None:
    from storage_node.access.access_file import edit_access_file, read_access_file
    from storage_node.access.document import parse_rule

    user, token = node.new_user()
    read = lambda: node.call(token, "GET", f"/v1/topics/{TOPIC}").status_code  # noqa: E731
    assert read() == 403
    # another writer of the file (another node, the operator): the node takes it by itself
    rule = parse_rule({"user": user, "operation": "describe", "resource": "topic", "name": TOPIC})
    edit_access_file(node.access_file, lambda d: d.with_rule(rule))
    wait_until(lambda: read() == 200, 30, "the rule written to the file to apply")
    rejected = lambda: _metric(node, "msgstore_access_file_rejected_total")  # noqa: E731
    before = rejected()
    good = node.access_file.read_bytes()
    node.access_file.write_text('{"version": 1, "users": "nope"}')
    wait_until(lambda: rejected() == before + 1, 30, "the bad file to be refused and counted")
    assert read() == 200  # the good document stays in force
    older = read_access_file(node.access_file.with_name("missing.json")).to_json()
    node.access_file.write_text(__import__("json").dumps(older))  # generation 0: older
    wait_until(lambda: rejected() == before + 2, 30, "the older generation to be refused")
    assert read() == 200
    node.access_file.write_bytes(good)  # the good one back (same generation: taken)
    node.ok("POST", "/v1/users", {"name": "after-bad", "tls_subject": "CN=after"})


def _metric(node: Node, name: str, labels: str = "") -> float:
    page = requests.get(node.proc.url("/metrics"), timeout=10).text
    for line in page.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not on the page")


def test_denials_and_changes_are_counted(node: Node) -> None:
    denied = '{operation="delete",resource="topic"}'
    before = _metric(node, "msgstore_access_denied_total", denied)
    added = _metric(node, "msgstore_access_changes_total", '{kind="user_added"}')
    _user, token = node.new_user()
    assert node.call(token, "DELETE", f"/v1/topics/{TOPIC}").status_code == 403
    assert _metric(node, "msgstore_access_denied_total", denied) == before + 1
    assert _metric(node, "msgstore_access_changes_total", '{kind="user_added"}') == added + 1
    log = node.proc.log.read_text()
    assert '"operation": "delete", "resource": "topic:acl-data", "source": "127.0.0.1"' in log


BAD_INPUT: list[tuple[str, str, Any, int, str]] = [
    ("POST", "/v1/users", {"name": "a b"}, 400, "name"),
    ("POST", "/v1/users", {"name": "x", "extra": 1}, 400, "unknown field"),
    ("POST", "/v1/users", {"name": "x", "token": False}, 400, "tls_subject"),
    ("POST", "/v1/users", [], 400, "JSON object"),
    ("POST", "/v1/acls", {"user": "u0", "operation": "fly", "resource": "topic", "name": "t"}, 400, "operation"),
    ("POST", "/v1/acls", {"user": "u0", "operation": "read", "resource": "node", "name": "t"}, 400, "resource"),
    ("POST", "/v1/acls", {"user": "u0", "operation": "read", "resource": "topic", "name": "a/b"}, 400, "name"),
    ("POST", "/v1/acls", {"user": "ghost", "operation": "read", "resource": "topic", "name": "t"}, 404, "ghost"),
    ("DELETE", "/v1/acls", {"user": "u0", "operation": "alter", "resource": "group", "name": "zz"}, 404, "no such"),
    ("DELETE", "/v1/users/ghost", None, 404, "ghost"),
    ("DELETE", "/v1/users/a%20b", None, 400, "name"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "status", "words"), BAD_INPUT)
def test_bad_input_is_refused_and_changes_nothing(
    node: Node, method: str, path: str, body: Any, status: int, words: str
) -> None:
    node.ok("GET", "/v1/users")
    before = node.access_file.read_bytes()
    resp = node.call(SUPER, method, path, body)
    assert resp.status_code == status, resp.text
    assert words in resp.json()["error"]["message"]
    assert node.access_file.read_bytes() == before


def test_an_existing_user_is_refused_and_keeps_its_token(node: Node) -> None:
    user, token = node.new_user()
    resp = node.call(SUPER, "POST", "/v1/users", {"name": user})
    assert resp.status_code == 400 and "exists already" in resp.json()["error"]["message"]
    node.grant(user, "describe", "topic", TOPIC)
    assert node.call(token, "GET", f"/v1/topics/{TOPIC}").status_code == 200


def test_rules_are_removed_by_body_or_query(node: Node) -> None:
    user, token = node.new_user()
    rule = {"user": user, "operation": "describe", "resource": "topic", "name": TOPIC}
    node.grant(**{k: v for k, v in rule.items()})  # type: ignore[arg-type]
    assert node.ok("POST", "/v1/acls", rule)["changed"] is False  # there already
    assert node.call(token, "GET", f"/v1/topics/{TOPIC}").status_code == 200
    node.ok("DELETE", "/v1/acls", params=rule)
    assert node.call(token, "GET", f"/v1/topics/{TOPIC}").status_code == 403
    node.grant(**{k: v for k, v in rule.items()})  # type: ignore[arg-type]
    node.ok("DELETE", "/v1/acls", rule)
    assert node.ok("GET", "/v1/acls", params={"user": user})["acls"] == []


Check = Callable[[requests.Response], bool]


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({}, "no access file"),
        ({"MSGSTORE_ACCESS_MANAGED": "true"}, "MessageStoreUser"),
    ],
    ids=["two-token mode", "managed"],
)
def test_user_changes_answer_409_where_users_are_not_the_nodes(
    node_factory: Any, tmp_path: Path, env: dict[str, str], words: str
) -> None:
    access = tmp_path / "managed.json"
    access.write_text('{"version": 1, "generation": 4, "users": [], "acls": []}')
    if env:
        env = {**env, "MSGSTORE_ACCESS_FILE": str(access)}
    n = node_factory("m", env={"MSGSTORE_TOKEN": SUPER, **env})
    before = access.read_bytes()
    for method, path, body in (
        ("POST", "/v1/users", {"name": "x"}),
        ("DELETE", "/v1/users/x", None),
        ("POST", "/v1/acls", {"user": "x", "operation": "read", "resource": "topic", "name": "t"}),
    ):
        resp = requests.request(method, n.url(path), json=body, headers=bearer(SUPER), timeout=30)
        assert resp.status_code == 409, resp.text
        assert resp.json()["error"]["code"] == "access_managed"
        assert words in resp.json()["error"]["message"]
    listed = requests.get(n.url("/v1/users"), headers=bearer(SUPER), timeout=30).json()
    assert listed["users"] == [] and listed["managed"] is bool(env)
    assert access.read_bytes() == before

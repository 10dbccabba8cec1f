"""Users and ACL rules on a 3-node local cluster: cluster-wide lookups by key and message ID
asked of any node never reveal a message of a topic the user may not read (not even that it
exists), and the ``msgstore user|acl`` commands end to end: a new user's token works on
the topics its rules allow, on every node, and is refused elsewhere and once revoked."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from storage_node.cli.local import LocalCluster
from tests.waiting import wait_until

SUPER = "cluster-super-" + "z" * 16
CLI = [sys.executable, "-m", "storage_node.cli"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("acl-cluster"))
    c.up(nodes=3, env={"MSGSTORE_TOKEN": SUPER, "MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    yield c
    c.down()


def msgstore(cluster: LocalCluster, *args: str, token: str = SUPER, node: int = 0) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    env.update({"MSGSTORE_ENDPOINT": cluster.addresses[node], "MSGSTORE_TOKEN": token})
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=env, timeout=120, input=""
    )


def get(address: str, path: str, token: str) -> requests.Response:
    return requests.get(address + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_the_access_file_is_shared_and_owner_only(secured: LocalCluster) -> None:
    assert stat.S_IMODE(secured.access_file.stat().st_mode) == 0o600
    state = json.loads((secured.dir / "cluster.json").read_text())
    assert state["env"]["MSGSTORE_ACCESS_FILE"] == str(secured.access_file)


def test_lookups_never_reveal_a_message_of_an_unreadable_topic(secured: LocalCluster) -> None:
    from storage_node.client import Client

    with Client(secured.addresses, token=SUPER) as admin:
        for topic in ("look-pub", "look-priv"):
            admin.create_topic(topic, 3)
        # explicit partitions: every node holds messages of both topics
        batch = [{"value": f"v{p}", "key": "k", "partition": p} for p in range(3)]
        public = [r["msg_id"] for r in admin.produce("look-pub", batch)]
        private = [r["msg_id"] for r in admin.produce("look-priv", batch)]
        user = admin.create_user("looker")
        admin.add_acl("looker", "read", "topic", "look-pub")
    token = user["token"]
    owners = set(
        json.loads(Path(secured.routing_file).read_text())["topics"]["look-priv"]["owners"]
    )
    assert len(owners) == 3  # the private messages are on every node: found locally and by peers
    unknown = private[0].rsplit("-", 1)[0] + "-999999"
    for address in secured.addresses:
        wait_until(lambda a=address: get(a, "/v1/topics/look-pub", token).ok, 30, "the user")
        found = get(address, "/v1/topics/look-pub/keys/k", token).json()
        assert sorted(m["msg_id"] for m in found["messages"]) == sorted(public)
        assert found["unreachable_nodes"] == []
        assert get(address, "/v1/topics/look-priv/keys/k", token).status_code == 403
        for msg_id in public:
            assert get(address, f"/v1/messages/{msg_id}", token).json()["msg_id"] == msg_id
        missing = get(address, f"/v1/messages/{unknown}", token)
        assert missing.status_code == 404
        for msg_id in private:
            hidden = get(address, f"/v1/messages/{msg_id}", token)
            assert hidden.status_code == 404
            assert hidden.json() == json.loads(missing.text.replace(unknown, msg_id))
            assert get(address, f"/v1/messages/{msg_id}", SUPER).status_code == 200
        names = [t["name"] for t in get(address, "/v1/topics", token).json()["topics"]]
        assert "look-pub" in names and "look-priv" not in names


def test_cli_user_create_then_its_token_on_allowed_and_refused_topics(
    secured: LocalCluster,
) -> None:
    for topic in ("orders-eu", "payments"):
        assert msgstore(secured, "topic", "create", topic, "--partitions", "3").returncode == 0
    created = msgstore(secured, "user", "create", "orders-app")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert len(token) >= 40 and "shown this once" in created.stderr
    assert token not in secured.access_file.read_text()  # only its digest is kept
    for operation in ("write", "read"):
        added = msgstore(
            secured, "acl", "add", "--user", "orders-app", "--allow", operation,
            "--topic-prefix", "orders-",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == f"orders-app\t{operation}\ttopic\tprefix\torders-"
    assert "orders-app\ttoken\t-" in msgstore(secured, "user", "list").stdout.splitlines()
    listed = msgstore(secured, "acl", "list", "--user", "orders-app").stdout.splitlines()
    assert len(listed) == 2
    # the change went through node-0; node-2 applies it from the shared file by itself
    produce = lambda topic: subprocess.run(  # noqa: E731
        [*CLI, "produce", topic, "--input", "raw"],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")},
            "MSGSTORE_ENDPOINT": secured.addresses[2],
            "MSGSTORE_TOKEN": token,
        },
    )
    done = produce("orders-eu")
    assert done.returncode == 0, done.stderr
    refused = produce("payments")
    assert refused.returncode == 1 and "forbidden" in refused.stderr
    assert "payments" in refused.stderr
    consumed = msgstore(secured, "consume", "orders-eu", "--format", "raw", token=token, node=1)
    assert consumed.returncode == 0 and consumed.stdout == "hello\n", consumed.stderr
    assert msgstore(secured, "consume", "payments", token=token, node=1).returncode == 1
    # the user's own token may not manage users
    assert "forbidden" in msgstore(secured, "user", "list", token=token).stderr
    # remove a rule, then the user: its token stops working on every node
    removed = msgstore(
        secured, "acl", "remove", "--user", "orders-app", "--allow", "write",
        "--topic-prefix", "orders-",
    )  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    assert "forbidden" in produce("orders-eu").stderr
    assert msgstore(secured, "user", "delete", "orders-app").returncode == 0
    for address in secured.addresses:
        wait_until(
            lambda a=address: get(a, "/v1/topics", token).status_code == 401,
            30,
            f"the revoked token to be refused by {address}",
        )
    again = msgstore(secured, "user", "delete", "orders-app")
    assert again.returncode == 1 and "not_found" in again.stderr


def test_cli_usage_errors_exit_2(secured: LocalCluster) -> None:
    for args in (
        ("acl", "add", "--user", "x", "--allow", "read"),  # no resource
        ("acl", "add", "--user", "x", "--allow", "fly", "--topic", "t"),
        ("acl", "remove", "--user", "x", "--allow", "read", "--topic", "t", "--group", "g"),
        ("user", "create"),
        ("user", "create", "x", "--no-token"),
    ):
        proc = msgstore(secured, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: usage:")
    names = [line.split("\t")[0] for line in msgstore(secured, "user", "list").stdout.splitlines()]
    assert "x" not in names  # nothing was created

"""A node with users and ACL rules for the Kafka ACL tests: its access file (written with
``write_access_file``), SASL/PLAIN logins on raw connections, and what the node holds (topics,
messages, committed offsets, group members) read with the super-user's token, so a test can
prove a refused request changed nothing."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any

import requests
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

from storage_node.access.access_file import write_access_file
from storage_node.access.document import (
    AccessDocument,
    AclRule,
    Operation,
    Pattern,
    ResourceType,
    User,
    token_digest,
)
from tests.integration.kafka.conftest import KafkaNode
from tests.integration.kafka.wire import Wire

TOKEN = "super-" + uuid.uuid4().hex
READ_TOKEN = "read-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECOND = datetime.timedelta(seconds=1)
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
PREFIX, LITERAL = Pattern.PREFIX, Pattern.LITERAL


def rule(user: str, op: Operation, resource: ResourceType, name: str, pattern=PREFIX) -> AclRule:
    return AclRule(user, op, resource, pattern, name)


# every user's token, and the rules of the table-driven test: each user may do one thing
USERS = {name: f"{name}-{uuid.uuid4().hex}" for name in (
    "writer", "reader", "describer", "creator", "deleter", "stranger",
)}  # fmt: skip
RULES = (
    rule("writer", Operation.WRITE, TOPIC, "w-"),
    rule("reader", Operation.READ, TOPIC, "r-"),
    rule("reader", Operation.READ, GROUP, "g-"),
    rule("describer", Operation.DESCRIBE, TOPIC, "r-"),
    rule("describer", Operation.DESCRIBE, GROUP, "g-"),
    rule("creator", Operation.CREATE, TOPIC, "c-"),
    rule("deleter", Operation.DELETE, TOPIC, "d-"),
    rule("stranger", Operation.READ, TOPIC, "elsewhere", LITERAL),
)


def document(generation: int, users: dict[str, str], rules: tuple[AclRule, ...]) -> AccessDocument:
    return AccessDocument(
        generation=generation,
        users=tuple(User(n, token_sha256=token_digest(t)) for n, t in users.items()),
        acls=rules,
    )


def start_node(data_dir: Path, users: dict[str, str], rules: tuple[AclRule, ...]) -> KafkaNode:
    """A node with both node tokens and an access file of ``users`` and ``rules``."""
    access = data_dir / "access.json"
    data_dir.mkdir(parents=True, exist_ok=True)
    write_access_file(access, document(1, users, rules))
    node = KafkaNode(
        data_dir / "node",
        {
            "MSGSTORE_TOKEN": TOKEN,
            "MSGSTORE_READ_TOKEN": READ_TOKEN,
            "MSGSTORE_ACCESS_FILE": str(access),
        },
    )
    node.start(wait=False)
    node.wait_ready(timeout=180)  # a loaded machine may take a while to start a node
    return node


def credentials(who: str) -> tuple[str, str]:
    """(username, password) of a principal of the tests: a user, ``super`` or ``readtoken``."""
    if who == "super":
        return "any", TOKEN
    if who == "readtoken":
        return "any", READ_TOKEN
    return who, USERS[who]


def login(node: KafkaNode, who: str, password: str | None = None) -> Wire:
    """A raw connection authenticated with SASL/PLAIN as ``who``."""
    user, token = credentials(who)
    wire = Wire(node.kafka_port)
    assert wire.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    answer = wire.call(
        SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password or token}".encode())
    )
    assert answer.error_code == ErrorCode.none, answer.error_message
    return wire


def create_topic(node: KafkaNode, name: str, partitions: int = 1) -> None:
    r = requests.post(
        node.url("/v1/topics"), json={"name": name, "partitions": partitions}, headers=AUTH,
        timeout=30,
    )  # fmt: skip
    assert r.status_code in (200, 201), r.text


def append(node: KafkaNode, topic: str, *values: str) -> None:
    body = {"messages": [{"value": v, "partition": 0} for v in values]}
    r = requests.post(node.url(f"/v1/topics/{topic}/messages"), json=body, headers=AUTH, timeout=30)
    assert r.status_code == 200, r.text


def topics(node: KafkaNode, containing: str = "") -> dict[str, list[list[int]]]:
    """The topics whose names contain ``containing``, with their partitions' (first, next)
    offsets."""
    r = requests.get(node.url("/v1/topics"), headers=AUTH, timeout=30)
    r.raise_for_status()
    names = [t["name"] if isinstance(t, dict) else t for t in r.json()["topics"]]
    out = {}
    for name in sorted(n for n in names if containing in n):
        doc = requests.get(node.url(f"/v1/topics/{name}"), headers=AUTH, timeout=30).json()
        out[name] = [[p["first_offset"], p["next_offset"]] for p in doc["partition_offsets"]]
    return out


def committed(node: KafkaNode, group: str) -> dict[str, Any]:
    r = requests.get(node.url(f"/v1/consumer-groups/{group}/offsets"), headers=AUTH, timeout=30)
    return r.json()["offsets"] if r.status_code == 200 else {}


def members(node: KafkaNode, group: str) -> list[str]:
    wire = login(node, "super")
    try:
        (described,) = wire.call(
            DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)
        ).groups
    finally:
        wire.close()
    return sorted(m.member_id for m in described.members)


def snapshot(node: KafkaNode, cid: str, group: str) -> dict[str, Any]:
    """What a request could have changed: the case's topics and their messages, the group's
    offsets and members."""
    return {
        "topics": topics(node, cid),
        "offsets": committed(node, group),
        "members": members(node, group),
    }


def join(group: str, member_id: str = "") -> Any:
    return join_v5.JoinGroupRequest(
        group_id=group, session_timeout=30 * SECOND, rebalance_timeout=2 * SECOND,
        member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=(join_v5.JoinGroupRequestProtocol(name="range", metadata=b"\0"),),
    )  # fmt: skip


def joined_member(node: KafkaNode, group: str) -> tuple[str, int]:
    """A member of ``group`` (joined and synced as the super-user): (member id, generation)."""
    wire = login(node, "super")
    try:
        first = wire.call(join(group))
        assert first.error_code == ErrorCode.member_id_required
        done = wire.call(join(group, first.member_id))
        assert done.error_code == ErrorCode.none, done
        sync = wire.call(
            SyncGroupRequest(
                group_id=group, generation_id=done.generation_id, member_id=done.member_id,
                group_instance_id=None, protocol_type="consumer", protocol_name="range",
                assignments=(SyncGroupRequestAssignment(member_id=done.member_id,
                                                        assignment=b""),),
            )
        )  # fmt: skip
        assert sync.error_code == ErrorCode.none
    finally:
        wire.close()
    return done.member_id, done.generation_id

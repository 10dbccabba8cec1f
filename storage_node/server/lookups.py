"""Cluster-wide lookups by key and by message ID: this node's led logs, then every peer at
once (``scope=local`` there), merged newest first. The HTTP routes and the console call
these, so a lookup reaches the stores one way whichever front end asked."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from storage_node.errors import Incomplete, NotFound
from storage_node.server.peer_fanout import peer_documents
from storage_node.server.runtime import NodeRuntime
from storage_node.store import Message
from storage_node.wire.message_json import headers_from_json, message_fields


@dataclass(frozen=True)
class KeyLookup:
    """A key lookup's answer: the messages (newest first, at most the cap), whether the cap
    cut it, and the peers that did not answer (the answer may miss their messages)."""

    messages: list[Message]
    limit_reached: bool
    unreachable: list[str]


def key_path(topic: str, key: str) -> str:
    """The key route's path for a topic and key, as a peer is asked it."""
    return f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key, safe='')}"


def newest_first(answers: list[list[Message]]) -> list[Message]:
    """The answers of several logs (each newest first, in its log's order) merged by store
    time: ties keep each log's own order (its log position), never a compare of IDs."""
    return list(heapq.merge(*answers, key=lambda m: -m.store_timestamp))


def message_from_json(doc: dict[str, Any]) -> Message:
    """A peer's JSON message back as a Message, so local and peer matches merge as one list."""
    return Message(**message_fields(doc), headers=headers_from_json(doc))


async def lookup_key(
    rt: NodeRuntime,
    topic: str,
    key: str,
    begin: int,
    end: int,
    max_count: int,
    scope: str,
    path: str | None = None,
) -> KeyLookup:
    """Messages of ``topic`` with ``key`` stored in [begin, end], newest first, at most
    ``max_count``: from every log this node leads and (``scope`` cluster) every peer.
    ``path``: the key route's raw path to ask peers (built from topic and key if None)."""
    answers: list[list[Message]] = []
    limit_reached = False
    for store in rt.partitions.lookup_stores():  # every log this node leads
        result = await rt.in_thread(store.lookup_key, topic, key, begin, end, max_count)
        answers.append(result.messages)
        limit_reached = limit_reached or bool(result.limit_reached)
    unreachable: list[str] = []
    if scope == "cluster":
        params = {"scope": "local", "begin": str(begin), "end": str(end), "max": str(max_count)}
        peer_path = path if path is not None else key_path(topic, key)
        peer_answers, unreachable = await peer_documents(rt, peer_path, params)
        for answer in peer_answers:
            answers.append([message_from_json(m) for m in answer["messages"]])
            limit_reached = limit_reached or bool(answer.get("limit_reached"))
    messages = newest_first(answers)
    if len(messages) > max_count:
        messages = messages[:max_count]
        limit_reached = True
    return KeyLookup(messages, limit_reached, unreachable)


async def find_message(
    rt: NodeRuntime,
    msg_id: str,
    scope: str,
    readable: Callable[[str], bool] = lambda topic: True,
) -> dict[str, Any] | Message:
    """The message with this ID: a Message from a log this node leads, else (``scope``
    cluster) the JSON document of the peer holding it. NotFound when no node has it,
    Incomplete when none that answered has it and some did not answer.

    A message of a topic ``readable`` refuses counts as not found, here and on every peer,
    so the answer is the one an unknown ID gets: it does not even tell that it exists."""
    try:  # every log this node leads
        found = await rt.partitions.get_message(msg_id)
        if readable(found.topic):
            return found
        if scope == "local":
            raise NotFound(f"no message with ID {msg_id!r}")
    except NotFound:
        if scope == "local":
            raise
    path = f"/v1/messages/{quote(msg_id, safe='')}"
    answers, unreachable = await peer_documents(rt, path, {"scope": "local"})
    for answer in answers:
        if isinstance(answer, dict) and readable(str(answer.get("topic"))):
            return answer
    if unreachable:
        raise Incomplete(
            f"no message with ID {msg_id!r} on the nodes that answered; "
            f"{', '.join(unreachable)} did not answer and may hold it",
            msg_id=msg_id,
            unreachable_nodes=unreachable,
        )
    raise NotFound(f"no message with ID {msg_id!r}", unreachable_nodes=unreachable)

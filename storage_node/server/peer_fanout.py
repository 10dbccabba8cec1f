"""Asking every other node at once: the cluster-wide routes send one request to each peer
together and merge what comes back, so a slow or dead peer costs one timeout, not one each."""

from __future__ import annotations

import asyncio
from typing import Any

from storage_node.errors import MsgStoreError
from storage_node.server.runtime import NodeRuntime


async def ask_peers(
    rt: NodeRuntime, method: str, path: str, params: dict[str, str], body: Any = None
) -> list[tuple[str, Any]]:
    """(peer id, its answer or the exception it raised) for every other node, in the routing
    table's order; an answer is None for a 404."""
    peers = rt.routing.peers()
    if not peers:
        return []
    answers = await asyncio.gather(
        *(rt.peer_call(method, address, path, params, body) for _, address in peers),
        return_exceptions=True,
    )
    return [(peer_id, answer) for (peer_id, _), answer in zip(peers, answers, strict=True)]


async def peer_documents(
    rt: NodeRuntime, path: str, params: dict[str, str]
) -> tuple[list[Any], list[str]]:
    """GET ``path`` from every other node: the documents they answered (a 404 answers none)
    and the ids of the nodes that did not answer."""
    found: list[Any] = []
    unreachable: list[str] = []
    for peer_id, answer in await ask_peers(rt, "GET", path, params):
        if isinstance(answer, BaseException):
            unreachable.append(peer_id)
        elif answer is not None:
            found.append(answer)
    return found, unreachable


def failure_reason(exc: BaseException) -> str:
    """Why a peer did not do what it was asked: its typed error's message, else the exception."""
    if isinstance(exc, MsgStoreError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"

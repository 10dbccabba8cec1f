"""The IP a replicated log's message IDs carry, kept in ``log.json`` beside the log so that
it survives failovers: whichever node leads the log, its IDs stay those of one log.

A missing file means the copy never heard of one (its first leader picks it); a file that
cannot be read is an error (``CorruptData``), never "no IP": a stand-in IP picked instead
would silently change the identity of every message ID handed out afterwards.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import zlib

from storage_node.backend.files import atomic_write
from storage_node.errors import CorruptData

log = logging.getLogger(__name__)
LOG_INFO = "log.json"
STANDIN_NET = int(ipaddress.IPv4Address("240.0.0.0"))  # 240.0.0.0/4: reserved, no host has one


def read_log_ip(directory: str) -> str | None:
    """The IP in ``directory``/log.json; None when there is no such file."""
    path = os.path.join(directory, LOG_INFO)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        ip = json.loads(raw)["node_ip"]
        return str(ipaddress.IPv4Address(ip))
    except (ValueError, KeyError, TypeError) as exc:
        log.error("%s cannot be read (%s): the log's message-ID IP is unknown", path, exc)
        raise CorruptData(f"{path} cannot be read: {exc!r}", path=path) from None


def write_log_ip(directory: str, ip: str) -> None:
    atomic_write(os.path.join(directory, LOG_INFO), json.dumps({"node_ip": ip}).encode())


def standin_ip(log_id: str, log_ids: list[str]) -> str:
    """The IP a log's message IDs carry when no node address gives it one: an address in
    240.0.0.0/4, which no host is given, so it never equals a log's IP taken from its first
    leader's address. Two logs of a routing table never get the same one: the logs, in
    sorted order, each take the first free address from a hash of their name on."""
    taken: set[int] = set()
    mine = None
    for name in sorted({*log_ids, log_id}):
        slot = zlib.crc32(name.encode()) & 0x0FFFFFFF
        while slot in taken:
            slot = (slot + 1) & 0x0FFFFFFF
        taken.add(slot)
        if name == log_id:
            mine = slot
    assert mine is not None
    return str(ipaddress.IPv4Address(STANDIN_NET | mine))

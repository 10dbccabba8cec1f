"""Log lines of the node and the failover controller: one JSON object per event, or text.

Each line carries ``ts``, ``level``, ``component`` (named from the logger: store,
replication, routing, http, tls, node, controller, metrics), ``node``, ``msg``, and the
``log``, ``epoch``, ``topic``, ``partition``, ``group`` (and for an access denial
``principal``, ``operation``, ``resource``, ``source``) a call passes in ``extra`` where
they apply; an exception goes in ``error``. ``MSGSTORE_LOG_FORMAT=text`` prints
``time node level component: message [log=... epoch=...]`` for people instead. The secrets handed to
``configure`` (the tokens) are replaced by ``[redacted]`` wherever they would appear; request
bodies and headers are never logged, so no payload reaches a line.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Iterable

FORMATS = ("json", "text")
# an access denial (storage_node/access) adds who, what, on which resource, from where
FIELDS = (
    "log",
    "epoch",
    "topic",
    "partition",
    "group",
    "principal",
    "operation",
    "resource",
    "source",
)
REDACTED = "[redacted]"
# logger name prefix -> component (the longest matching prefix wins)
COMPONENTS = {
    "storage_node.store": "store",
    "storage_node.replication": "replication",
    "storage_node.server.routing_state": "routing",
    "storage_node.server.middleware": "http",
    "storage_node.server.metrics": "metrics",
    "storage_node.server": "node",
    "storage_node.tls": "tls",
    "msgstore.node": "node",
    "msgstore.controller": "controller",
    "msgstore.access": "access",
    "aiohttp": "http",
}


def component_of(logger: str) -> str:
    best = ""
    for prefix in COMPONENTS:
        if (logger == prefix or logger.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return COMPONENTS[best] if best else logger.rsplit(".", 1)[-1]


class _Formatter(logging.Formatter):
    def __init__(self, node: str, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__()
        self.node = node
        self.json = fmt == "json"
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        component = component_of(record.name)
        message = record.getMessage()
        error = self.formatException(record.exc_info) if record.exc_info else None
        if self.json:
            doc: dict[str, object] = {
                "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname.lower(),
                "component": component,
                "node": self.node,
                "msg": message,
            }
            for key in FIELDS:
                value = record.__dict__.get(key)
                if value is not None:
                    doc[key] = value
            if error:
                doc["error"] = error
            line = json.dumps(doc, ensure_ascii=False, default=str)
        else:
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            line = f"{stamp} {self.node} {record.levelname} {component}: {message}"
            fields = [
                f"{k}={record.__dict__[k]}" for k in FIELDS if record.__dict__.get(k) is not None
            ]
            if fields:
                line += f" [{' '.join(fields)}]"
            if error:
                line += "\n" + error
        for secret in self.secrets:
            line = line.replace(secret, REDACTED)
        return line


def check_format(fmt: str) -> str:
    """The format name, lower-cased; ValueError naming the choices otherwise."""
    value = (fmt or "json").strip().lower()
    if value not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return value


def configure(node: str, level: str, fmt: str, secrets: Iterable[str] = ()) -> None:
    """Route every logger of the process to stderr in ``fmt`` (``json`` or ``text``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(node, check_format(fmt), secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))

"""Parsing of path, query and body parameters into typed values with clear 400 errors."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from storage_node.errors import InvalidArgument, InvalidName
from storage_node.formats.names import is_valid_name
from storage_node.wire.routing_table import check_topic_name

MAX_INT64 = 2**63 - 1
FILE_KINDS = ("segment", "key_index")


def topic_param(request: web.Request) -> str:
    return check_topic_name(request.match_info["topic"])


def group_param(request: web.Request) -> str:
    group = request.match_info["group"]
    if not is_valid_name(group):
        raise InvalidName(f"invalid consumer group name {group!r}")
    return group


def file_params(request: web.Request) -> tuple[str, str]:
    kind, name = request.match_info["kind"], request.match_info["name"]
    if kind not in FILE_KINDS:
        raise InvalidArgument(f"file kind must be one of {FILE_KINDS}, got {kind!r}")
    if not is_valid_name(name):
        raise InvalidName(f"invalid file name {name!r}")
    return kind, name


def log_param(request: web.Request) -> str | None:
    """The optional ``log`` query parameter: one replicated log of those this node leads
    (file and compaction routes; absent: every log it leads)."""
    log_id = request.query.get("log") or None
    if log_id is not None and not is_valid_name(log_id):
        raise InvalidName(f"invalid log id {log_id!r}")
    return log_id


def int_value(name: str, raw: Any, low: int = 0, high: int = MAX_INT64) -> int:
    if isinstance(raw, str):
        text = raw.strip()
        if not re.fullmatch(r"-?[0-9]{1,19}", text):
            raise InvalidArgument(f"{name} must be an integer, got {raw!r}")
        raw = int(text)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidArgument(f"{name} must be an integer")
    if not low <= raw <= high:
        raise InvalidArgument(f"{name} must be between {low} and {high}, got {raw}")
    return raw


def query_int(
    request: web.Request, name: str, default: int | None, low: int = 0, high: int = MAX_INT64
) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    return int_value(name, raw, low, high)


def path_int(request: web.Request, name: str, low: int = 0, high: int = MAX_INT64) -> int:
    return int_value(name, request.match_info[name], low, high)


def scope_param(request: web.Request) -> str:
    scope = request.query.get("scope", "cluster")
    if scope not in ("cluster", "local"):
        raise InvalidArgument(f"scope must be 'cluster' or 'local', got {scope!r}")
    return scope


async def json_body(request: web.Request) -> Any:
    """The request body as JSON (400 when it is not)."""
    raw = await request.read()
    if not raw:
        raise InvalidArgument("the request needs a JSON body")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"the body is not valid JSON: {exc}") from None

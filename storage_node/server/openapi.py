"""The OpenAPI 3.1 document of the node API (served at /v1/openapi.json), generated from
the route table (``openapi_routes.py``) and the pydantic models it names."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

import storage_node
from storage_node.server import api_models as m
from storage_node.server.openapi_routes import ROUTES, Route
from storage_node.server.openapi_routes_access import ACCESS_ROUTES


def _models(routes: tuple[Route, ...]) -> list[type[BaseModel]]:
    """Every model the routes name, in a stable order (the error model first)."""
    seen: dict[str, type[BaseModel]] = {"Error": m.Error}
    for route in routes:
        named: list[type[BaseModel]] = [route.body] if route.body is not None else []
        for reply in route.replies.values():
            if isinstance(reply.model, tuple):
                named.extend(reply.model)
            elif reply.model is not None:
                named.append(reply.model)
        for model in named:
            seen.setdefault(model.__name__, model)
    return list(seen.values())


def _strip_titles(schema: Any) -> Any:
    """pydantic's generated titles repeat the property names; the document is shorter
    without them."""
    if isinstance(schema, dict):
        return {
            k: _strip_titles(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def build_document(routes: tuple[Route, ...]) -> dict[str, Any]:
    """The document of ``routes``: their paths, and the schemas of every model they name."""
    _, defs = models_json_schema(
        [(model, "validation") for model in _models(routes)],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method] = route.to_openapi()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "msgstore node API",
            "version": storage_node.__version__,
            "description": 'One storage node. Errors are {"error": {"code", "message", ...}}.',
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": _strip_titles(defs.get("$defs", {})),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@cache
def _document() -> dict[str, Any]:
    return build_document(ROUTES + ACCESS_ROUTES)


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may mutate it)."""
    return copy.deepcopy(_document())

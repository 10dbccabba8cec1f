"""ApiVersions (key 18): the APIs and versions this node answers, from the dispatch table."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.api_versions.v0 import response as v0
from kio.schema.errors import ErrorCode

from storage_node.kafka.registry import Api, ApiTable, RequestContext


def _versions(ctx_make: Any, table: ApiTable) -> tuple[Any, ...]:
    return tuple(
        ctx_make(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in sorted(table.apis.values(), key=lambda a: a.key)
    )


def unsupported_answer(table: ApiTable) -> Any:
    """The v0 answer to an ApiVersions request of a version above ours."""
    return v0.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=_versions(lambda **f: v0.ApiVersion(**f), table),
    )


def register(table: ApiTable) -> None:
    async def handle(ctx: RequestContext, request: Any) -> Any:
        return ctx.make(
            "ApiVersionsResponse",
            error_code=ErrorCode.none,
            api_keys=_versions(lambda **f: ctx.make("ApiVersion", **f), table),
            throttle_time=datetime.timedelta(0),
        )

    table.add(Api(key=18, name="ApiVersions", min_version=0, max_version=3, handler=handle))

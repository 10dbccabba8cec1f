"""Errors a Spark user can act on, each naming the option or node at fault.

They subclass the store's typed errors so callers that already catch ``MsgStoreError``
keep working; Spark shows the message text, so every message says what to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from storage_node.client import Forbidden, TlsError, Unauthenticated
from storage_node.errors import InvalidArgument, MsgStoreError, Unavailable, UnknownTopic


class OptionError(InvalidArgument):
    """An option of the msgstore data source is missing or has a bad value."""

    code = "invalid_option"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"msgstore option '{option}': {problem}", option=option)


class ColumnError(InvalidArgument):
    """A DataFrame column cannot be written as a message field."""

    code = "invalid_column"

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"msgstore column '{column}': {problem}", column=column)


@contextmanager
def explained(endpoints: list[str], topic: str | None = None) -> Iterator[None]:
    """Re-raise client errors with the hint a Spark user needs (which option, which node)."""
    try:
        yield
    except (Unauthenticated, Forbidden) as err:
        raise type(err)(
            f"msgstore refused the request ({err.code}): {err.message}; "
            "check the 'token' option (or MSGSTORE_TOKEN)"
        ) from None
    except TlsError as err:
        raise TlsError(
            f"msgstore TLS failed: {err.message}; check the 'ca' option (or MSGSTORE_CA)"
        ) from None
    except UnknownTopic as err:
        name = topic or "?"
        raise UnknownTopic(
            f"msgstore topic {name!r} does not exist (option 'topic'/'topics'): {err.message}",
            topic=name,
        ) from None
    except Unavailable as err:
        raise Unavailable(
            f"msgstore node unreachable: {err.message} (option 'endpoints' = {','.join(endpoints)})"
        ) from None
    except MsgStoreError:
        raise

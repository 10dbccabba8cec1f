"""The Kafka listener: every node speaks the Kafka wire protocol beside its HTTP API.

A front end only: it parses a request, calls the node's partition service
(``storage_node.partitions``) for the store serving a partition, and encodes the answer.
Routing, idempotence, replication acks and fencing stay below it, shared with the HTTP API.

Modules
-------
- ``listener``: the asyncio server on the node's event loop; size-prefixed frames, the
  request header, the dispatch by API key, error answers, closing a connection on garbage.
- ``registry``: ``Api`` (key, versions, handler), ``ApiTable`` (the dispatch table) and
  ``RequestContext`` (what a handler is given).
- ``apis``: the one list of handler modules the listener loads.
- ``sasl``: who a connection is (SASL through the node's authorizer); ``acl``: what each API
  needs (``NEEDS``, one entry per API key) and the per-request checks (``Guard``).
- ``errors``: the store's typed errors as Kafka error codes.
- ``records``: record batches v2 in and out (the compiled ``record_codec``; ``decompress``
  bounds what a compressed batch may decompress to).
- one module per API family: ``api_versions``, ``metadata``, ``produce``, ``fetch``, ...

Registering a handler module
----------------------------
A handler module defines ``register(table: ApiTable) -> None`` and calls, once per API::

    table.add(Api(key=18, name="ApiVersions", min_version=0, max_version=3, handler=handle))

``handler`` is ``async def handle(ctx: RequestContext, request) -> response | None``:
``request`` is the kio request entity of the version the client sent (already parsed),
the answer a kio response entity of the same version (build it with ``ctx.make(name,
**fields)``, which takes the class of that version and drops fields the version lacks), or
None for a request that gets no answer (Produce with acks=0). Then add the module to
``HANDLER_MODULES`` in ``apis.py`` and the API's entry to ``acl.NEEDS`` (which operation on
which topics and groups it needs); the handler asks ``ctx.guard.topic(name)`` /
``ctx.guard.group(name)`` before it touches one and answers a refusal with the API's
authorization error code. Without an entry, only the super-user may send the API. Versions must be ones kio has schemas for. A handler
answers errors of its own API in the answer's error codes (``errors.error_code``); an
exception escaping a handler closes the connection (the client reconnects and retries).
"""

import sys as _sys

# kio registers Hypothesis strategies for its types whenever Hypothesis can be imported (a
# test dependency, so it is in the test environment): that import is 0.3-0.4 CPU s of every
# node start with Kafka on, spent on nothing a node uses. Hidden while kio loads, unless this
# process imported Hypothesis already (then kio registers its strategies as usual).
if "hypothesis" not in _sys.modules:
    _sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        import kio.serial  # noqa: F401  (kio's types load once, without Hypothesis)
    finally:
        del _sys.modules["hypothesis"]

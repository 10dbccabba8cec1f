"""Fixtures of the command-line tests (`msgstore ...`, `make run`'s demo): the node folder's
local cluster of real node processes."""

from __future__ import annotations

from tests.integration.node.conftest import cluster  # noqa: F401 - a fixture, found by pytest

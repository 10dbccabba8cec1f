"""No module reaches into another layer's objects: a private attribute (``obj._x``) is used
only within the layer whose classes define it, and nothing outside ``store/`` touches a
store's commit log, read path or columnar internals (``store.log``, ``.reads``,
``.columnar``): replication and the server use the ``Store`` façade's public surface
(docs/ENGINE_API.md). Checked on the source with ``ast``, beside the import graph."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.unit.test_import_graph import _layer, module_files

STORE_PACKAGE = "storage_node.store"
STORE_INTERNALS = ("reads", "columnar")  # on any object outside store/
STORE_LOG = "log"  # on an object whose expression names a store


def _layer_name(module: str) -> str:
    found = _layer(module)
    return found[0] if found is not None else module


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_definitions(files: dict[str, Path]) -> dict[str, set[str]]:
    """Private name -> the layers whose modules define it (a method, a ``self._x`` or class
    attribute, or a module-level name)."""
    defined: dict[str, set[str]] = {}
    for module, path in files.items():
        layer = _layer_name(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.append(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
            elif isinstance(node, ast.Assign):
                names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
            for name in names:
                if _is_private(name):
                    defined.setdefault(name, set()).add(layer)
    return defined


def reach_violations(sources: Iterable[tuple[str, str]], defined: dict[str, set[str]]) -> list[str]:
    """(module, source) pairs -> each reach into another layer, as 'module:line: what'."""
    bad: list[str] = []
    for module, source in sources:
        layer = _layer_name(module)
        in_store = module == STORE_PACKAGE or module.startswith(STORE_PACKAGE + ".")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Attribute):
                continue
            receiver = ast.unparse(node.value)
            where = f"{module}:{node.lineno}: {receiver}.{node.attr}"
            if _is_private(node.attr) and receiver not in ("self", "cls", "super()"):
                layers = defined.get(node.attr, set())
                if layers and layer not in layers:
                    bad.append(f"{where} (private to {', '.join(sorted(layers))})")
            if in_store:
                continue
            if node.attr in STORE_INTERNALS:
                bad.append(f"{where} (store internals: use the Store façade)")
            elif node.attr == STORE_LOG and receiver.lower().endswith("store"):
                bad.append(f"{where} (a store's commit log: use the Store façade)")
    return bad


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return module_files()


def test_the_check_catches_what_it_forbids(files):
    defined = private_definitions(files)
    assert "storage_node.store" in defined["_ckpt_lock"]
    made_up = [
        ("storage_node.server.routes_admin", "store._ckpt_lock.acquire()"),
        ("storage_node.replication.follower", "x = hosted.store.log.end"),
        ("storage_node.server.routes_messages", "store.reads.fetch_columns()"),
        ("storage_node.partitions.service", "ReadBatch = store.columnar.ReadBatch"),
    ]
    assert len(reach_violations(made_up, defined)) == 4
    allowed = [
        ("storage_node.store.topic_admin", "store._lock.acquire(); store.log.end"),
        ("storage_node.server.routes_admin", "self._x; node.log; store.log_ends()"),
        ("storage_node.client.consumer", "client._run(op)"),
    ]
    assert reach_violations(allowed, defined) == []


def test_no_module_reaches_into_another_layer(files):
    defined = private_definitions(files)
    sources = [(m, p.read_text(encoding="utf-8")) for m, p in sorted(files.items())]
    found = reach_violations(sources, defined)
    assert found == [], "\n".join(found)


# the layers above the store that hold stores and the partition service: the type checker
# must see what they call on them (issue: "a typed store surface")
TYPED_LAYERS = (
    "storage_node.server",
    "storage_node.replication",
    "storage_node.partitions",
    "storage_node.kafka",
)
HOLDS_A_STORE = ("store", "service")  # a name holding one of these is typed, never ``Any``


def untyped_stores(sources: Iterable[tuple[str, str]]) -> list[str]:
    """Arguments, annotated assignments and fields named like a store or the partition
    service (``store``, ``leader_store``, ``service``...) whose annotation is ``Any``, and
    functions named like one that return ``Any``."""

    def is_any(annotation: ast.expr | None) -> bool:
        """``Any``, ``typing.Any``, ``Any | None`` or ``Optional[Any]`` (quoted too); not a
        container of ``Any`` such as a settings dict."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = ast.parse(annotation.value, mode="eval").body
        if isinstance(annotation, ast.Name):
            return annotation.id == "Any"
        if isinstance(annotation, ast.Attribute):
            return annotation.attr == "Any"
        if isinstance(annotation, ast.BinOp):  # X | None
            return is_any(annotation.left) or is_any(annotation.right)
        if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", "") in (
            "Optional",
        ):
            return is_any(annotation.slice)
        return False

    def named_like(name: str) -> bool:
        return any(name == word or name.endswith("_" + word) for word in HOLDS_A_STORE)

    found: list[str] = []
    for module, text in sources:
        for node in ast.walk(ast.parse(text)):
            typed: list[tuple[str, ast.expr | None, int]] = []
            if isinstance(node, ast.arg):
                typed.append((node.arg, node.annotation, node.lineno))
            elif isinstance(node, ast.AnnAssign):
                target = node.target
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                typed.append((name, node.annotation, node.lineno))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                typed.append((node.name.removeprefix("_"), node.returns, node.lineno))
            for name, annotation, line in typed:
                if named_like(name) and is_any(annotation):
                    found.append(f"{module}:{line} {name}")
    return found


def test_the_typed_store_check_catches_what_it_forbids():
    bad = (
        "def f(store: Any, leader_store: 'Any', x: Any) -> None: ...\n"
        "class C:\n    service: Any = None\n"
        "def own_store() -> typing.Any: ...\n"
        "def g(store: Store, restore: Any, stores: dict[str, Any]) -> Store: ...\n"
        "def h(service: Optional[Any], user_store: Any | None) -> None: ...\n"
    )
    assert sorted(untyped_stores([("m", bad)])) == [
        "m:1 leader_store",
        "m:1 store",
        "m:3 service",
        "m:4 own_store",
        "m:6 service",
        "m:6 user_store",
    ]


def test_stores_and_the_partition_service_are_typed_above_the_store(files):
    sources = [
        (module, path.read_text(encoding="utf-8"))
        for module, path in files.items()
        if module.startswith(TYPED_LAYERS)
    ]
    assert untyped_stores(sources) == []

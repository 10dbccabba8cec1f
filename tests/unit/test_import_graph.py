"""The package structure, checked on the source: no import cycles between product modules, no
import upward between layers, and a client that loads neither the server nor the store.

Static imports are read with ``ast`` (function-local ones too; those under
``if TYPE_CHECKING:`` are kept apart, as they never run). The layer order is the one of
docs/ENGINE_API.md:

    base (errors, tls) < formats, backend < store < wire, replication < partitions
    < server | client (kafka beside server) < console (a front end of the client)
    < cli, demo, Spark

``server`` and ``client`` are peers that never import each other. The web console is a
client of the cluster, a process of its own: it loads the client and never the server,
the store or the partition service (it sees the nodes only through their HTTP API). The operator
(``msgstore_operator``) stands apart: it may use storage_node's base, formats and wire
modules and the failover controller (which needs only the routing table) and never loads the
store or the server, and only the CLI (which renders Spark Jobs with the operator's builders) may
import it — never its kopf parts.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {
    "storage_node": REPO / "storage_node",
    "msgstore_operator": REPO / "operator" / "msgstore_operator",
    "msgstore_spark": REPO / "spark" / "msgstore_spark",
}

# module prefix -> layer rank (the longest matching prefix wins)
LAYERS: dict[str, int] = {
    "storage_node": 0,
    "storage_node.errors": 0,
    "storage_node.tls": 0,
    "storage_node.backend": 1,
    "storage_node.formats": 1,
    "storage_node.access": 1,  # users and ACL rules: a pure model every front end checks
    "storage_node.store": 2,
    "storage_node.wire": 3,
    "storage_node.replication": 3,  # uses store and wire
    "storage_node.partitions": 4,  # which store serves a partition: below every front end
    "storage_node.server": 5,
    "storage_node.client": 5,
    # the Kafka listener: a front end beside the HTTP routes, over the partition service
    # and the node's runtime (server.runtime); server.serve starts it
    "storage_node.kafka": 5,
    # the web console: a process of its own over the client (``msgstore console``)
    "storage_node.console": 6,
    "storage_node.cli": 7,
    "storage_node.demo": 7,
    "msgstore_spark": 7,
}
PEERS = {"storage_node.server", "storage_node.client"}  # same layer, independent
OPERATOR_MAY_USE = (
    "storage_node.access",  # it writes the access document from MessageStoreUser resources
    "storage_node.errors",
    "storage_node.tls",
    "storage_node.mtls",  # the failover controller's client certificate (mTLS between nodes)
    "storage_node.formats",
    "storage_node.wire",
    "storage_node.replication.controller",  # the operator runs it for replicated stores
)
OPERATOR_USERS = ("storage_node.cli",)
OPERATOR_KOPF_PARTS = (
    "msgstore_operator.handlers",
    "msgstore_operator.kube",
    "msgstore_operator.reconcile",
)
ENGINE = ("storage_node.server", "storage_node.store")
# what a client of the cluster never loads: it reaches the nodes only over their API
NODE_SIDE = (*ENGINE, "storage_node.partitions", "storage_node.replication", "storage_node.kafka")
MAX_LINES = 500
# Modules over MAX_LINES (none now). Nothing of store/ or formats/ may be listed (a test
# checks it).
KNOWN_LONG: tuple[str, ...] = ()
# Cycles through ``if TYPE_CHECKING:`` imports being untangled (the same rule as above: none
# may be in store/ or formats/).
KNOWN_TYPE_CYCLES: tuple[list[str], ...] = ()
STRICT = ("storage_node.store", "storage_node.formats")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.source}:{self.line} imports {self.target}{kind}"


def module_files() -> dict[str, Path]:
    """Every product module by dotted name (a package by its own name, for __init__.py)."""
    out: dict[str, Path] = {}
    for top, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, anywhere (functions included), with its TYPE_CHECKING flag."""

    def walk(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from walk(child, True)
            for child in node.orelse:
                yield from walk(child, type_only)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, type_only)

    yield from walk(tree, False)


def _resolve(name: str, modules: Iterable[str]) -> str | None:
    """The product module an imported dotted name refers to (its longest known prefix)."""
    known = set(modules)
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_edges(files: dict[str, Path]) -> list[Edge]:
    edges: list[Edge] = []
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, type_only in _imports(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join([*package, base] if base else package)
                # `from package import submodule` imports the submodule
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            for name in names:
                target = _resolve(name, files)
                if target is not None and target != module:
                    edges.append(Edge(module, target, node.lineno, type_only))
    return edges


def _layer(module: str) -> tuple[str, int] | None:
    best: tuple[str, int] | None = None
    for prefix, rank in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, rank)
    return best


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_violations(edges: Iterable[Edge]) -> list[str]:
    """Upward imports, imports between peers, and the operator's boundary."""
    bad: list[str] = []
    for e in edges:
        src_op = _under(e.source, ["msgstore_operator"])
        dst_op = _under(e.target, ["msgstore_operator"])
        if src_op and dst_op:
            continue
        if src_op:
            if not _under(e.target, OPERATOR_MAY_USE):
                bad.append(f"{e}: the operator may use only {', '.join(OPERATOR_MAY_USE)}")
            continue
        if dst_op:
            if not _under(e.source, OPERATOR_USERS) or _under(e.target, OPERATOR_KOPF_PARTS):
                bad.append(f"{e}: only the CLI may use the operator's pure modules")
            continue
        src, dst = _layer(e.source), _layer(e.target)
        assert src is not None and dst is not None, e
        if dst[1] > src[1]:
            bad.append(f"{e}: upward ({src[0]} is layer {src[1]}, {dst[0]} is layer {dst[1]})")
        elif dst[1] == src[1] and src[0] != dst[0] and {src[0], dst[0]} <= PEERS:
            bad.append(f"{e}: {src[0]} and {dst[0]} are independent peers")
    return bad


def cycles(edges: Iterable[Edge], type_only_too: bool = False) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), runtime imports only
    unless ``type_only_too``."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if type_only_too or not e.type_only:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def runtime_closure(start: Iterable[str], edges: Iterable[Edge]) -> dict[str, list[str]]:
    """Every module importing ``start`` loads (parent packages included), with one import
    path to it, following runtime imports only."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only:
            graph.setdefault(e.source, set()).add(e.target)
    paths: dict[str, list[str]] = {}
    todo = [(m, [m]) for m in start]
    while todo:
        module, path = todo.pop()
        if module in paths:
            continue
        paths[module] = path
        parts = module.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts))]
        for nxt in [*parents, *sorted(graph.get(module, ()))]:
            if nxt not in paths:
                todo.append((nxt, [*path, nxt]))
    return paths


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Edge]]:
    files = module_files()
    return files, import_edges(files)


def test_the_walker_sees_the_product_and_its_imports(graph):
    files, edges = graph
    assert {"storage_node.client.common", "storage_node.wire.batch_codec"} <= set(files)
    assert len(files) > 100
    pairs = {(e.source, e.target) for e in edges}
    assert ("storage_node.client.common", "storage_node.wire.batch_codec") in pairs
    # function-local and relative imports are edges too
    assert ("storage_node.cli.main", "storage_node.server.serve") in pairs
    assert ("msgstore_operator.children.spark", "msgstore_operator.naming") in pairs
    assert any(e.type_only for e in edges)


def test_the_checks_catch_what_they_forbid():
    """Each rule flags a made-up edge that breaks it, so a passing run means something."""
    up = Edge("storage_node.store.store", "storage_node.server.runtime", 1, False)
    peer = Edge("storage_node.client.common", "storage_node.server.params", 1, False)
    op_in = Edge("msgstore_operator.routing", "storage_node.store.types", 1, False)
    op_out = Edge("storage_node.server.app", "msgstore_operator.naming", 1, False)
    kopf = Edge("storage_node.cli.spark_job", "msgstore_operator.handlers", 1, False)
    down = Edge("storage_node.server.app", "storage_node.store.types", 1, False)
    assert len(layer_violations([up, peer, op_in, op_out, kopf])) == 5
    assert layer_violations([down]) == []
    loop = [
        Edge("storage_node.cli.main", "storage_node.cli.admin", 1, False),
        Edge("storage_node.cli.admin", "storage_node.cli.main", 2, False),
    ]
    assert cycles(loop) == [["storage_node.cli.admin", "storage_node.cli.main"]]
    typed_loop = [loop[0], Edge("storage_node.cli.admin", "storage_node.cli.main", 2, True)]
    assert cycles(typed_loop) == []
    assert cycles(typed_loop, type_only_too=True) == [
        ["storage_node.cli.admin", "storage_node.cli.main"]
    ]


def test_no_import_cycles_between_product_modules(graph):
    _files, edges = graph
    assert cycles(edges) == []


def test_no_import_cycles_even_through_type_checking_imports(graph):
    """A cycle closed by a type-only import is still two modules that need each other: the
    store's parts are handed what they use (as ``Lifecycle`` and ``TopicAdmin`` are)."""
    _files, edges = graph
    known = [sorted(c) for c in KNOWN_TYPE_CYCLES]
    assert [c for c in cycles(edges, type_only_too=True) if c not in known] == []
    assert [m for c in known for m in c if _under(m, STRICT)] == []


def test_no_product_module_over_500_lines(graph):
    """One concept per module, split by concept before it grows past 500 lines."""
    files, _edges = graph
    long = {
        module: lines
        for module, path in sorted(files.items())
        if (lines := path.read_text().count("\n")) > MAX_LINES
    }
    assert {m: n for m, n in long.items() if not _under(m, KNOWN_LONG)} == {}
    assert [m for m in KNOWN_LONG if _under(m, STRICT)] == []


def test_no_upward_imports_between_layers(graph):
    _files, edges = graph
    assert layer_violations(edges) == []


@pytest.mark.parametrize(
    ("package", "must_load"),
    [
        ("storage_node.client", "storage_node.wire.batch_codec"),
        ("msgstore_operator", "storage_node.replication.controller"),
    ],
)
def test_the_client_and_the_operator_load_no_server_or_store_module(graph, package, must_load):
    files, edges = graph
    start = [m for m in files if _under(m, [package])]
    loaded = runtime_closure(start, edges)
    engine = {m: " -> ".join(path) for m, path in loaded.items() if _under(m, ENGINE)}
    assert engine == {}
    assert must_load in loaded


def test_the_console_is_a_client_of_the_cluster(graph):
    """The console asks the nodes through the client: nothing of a node's side loads."""
    files, edges = graph
    start = [m for m in files if _under(m, ["storage_node.console"])]
    loaded = runtime_closure(start, edges)
    node_side = {m: " -> ".join(path) for m, path in loaded.items() if _under(m, NODE_SIDE)}
    assert node_side == {}
    assert "storage_node.client" in loaded
    code = (
        "import sys\nimport storage_node.console.routes, storage_node.console.serve\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('storage_node'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    imported = proc.stdout.split()
    assert "storage_node.client.async_client" in imported
    assert [m for m in imported if _under(m, NODE_SIDE)] == []
    made_up = Edge("storage_node.console.search", "storage_node.server.lookups", 1, False)
    assert runtime_closure(["storage_node.console.search"], [made_up]).keys() & {
        "storage_node.server.lookups"
    }


def test_importing_the_client_loads_no_server_or_store_module():
    code = (
        "import sys\nfrom storage_node.client import AsyncClient, Client, Consumer\n"
        "mods = sorted(m for m in sys.modules if m.startswith('storage_node'))\n"
        "print(' '.join(mods))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split()
    assert "storage_node.client.sync_client" in loaded
    assert [m for m in loaded if _under(m, ENGINE)] == []


def test_a_product_module_over_400_lines_says_why_at_its_top(graph):
    """A long module is a choice written down, never an accident (the structure rule)."""
    files, _edges = graph
    unexplained = []
    for module, path in sorted(files.items()):
        text = path.read_text()
        lines = text.count("\n")
        if lines > 400:
            head = ast.get_docstring(ast.parse(text)) or ""
            if "Over 400 lines on purpose" not in head:
                unexplained.append(f"{module} ({lines} lines)")
    assert unexplained == []


def test_the_client_has_no_import_cycle_even_through_type_checking_imports(graph):
    """The clients import their consumers; a consumer knows a client only as a protocol,
    so not even a type-only import closes a loop inside ``storage_node.client``."""
    _files, edges = graph
    inside = [
        Edge(e.source, e.target, e.line, False)
        for e in edges
        if _under(e.source, ["storage_node.client"]) and _under(e.target, ["storage_node.client"])
    ]
    assert inside, "the walker found no imports inside the client"
    assert cycles(inside) == []

"""The package's shape: subpackages in one dependency order, no import cycle, short modules.

Every import counts, including those under ``TYPE_CHECKING`` and inside
functions: a cycle hidden from the interpreter still makes the code read in
circles. docs/architecture.md draws the same map.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cpstore"

#: The rooms, lowest first: a module may import from its own room and the rooms
#: before it, never from one after it. ``cpstore/__init__.py`` (the public API)
#: sits above them all and nothing in the package imports it.
LANGGRAPH_CLI = {"cpstore.cli.lg_diff_command"}
LAYERS = ("errors", "native", "run", "replay", "decision", "store", "langgraph", "cli")

#: The modules that may touch the storage engine (the LMDB backend of the seam).
LMDB_MODULES = frozenset(
    {
        "cpstore.store.lmdb_env",
        "cpstore.store.lmdb_txns",
        "cpstore.store.lmdb_growth",
        "cpstore.store.lmdb_errors",
        "cpstore.store.lmdb_open",
        "cpstore.store.lmdb_backend",
        "cpstore.store.lmdb_copy",
    }
)

#: The modules that may touch PostgreSQL (psycopg, its pool): the PostgreSQL backend.
PG_MODULES = frozenset(
    {
        "cpstore.store.pg_backend",
        "cpstore.store.pg_count",
        "cpstore.store.pg_errors",
        "cpstore.store.pg_open",
        "cpstore.store.pg_pool",
        "cpstore.store.pg_table",
        "cpstore.store.pg_txn",
    }
)

MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports (absolute names), wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return found


GRAPH = {
    name: {m for m in _imports(name, path) if m in MODULES and m != name}
    for name, path in MODULES.items()
}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package root
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def test_every_module_belongs_to_a_room() -> None:
    """Each module is the root, a compiled core, or in one of the rooms of LAYERS."""
    stray = [m for m in MODULES if m != "cpstore" and _layer(m) is None]
    assert stray == []


def test_imports_point_down_the_rooms_only() -> None:
    """No module imports from a room after its own, or the package root."""
    wrong = []
    for module, targets in GRAPH.items():
        here = _layer(module)
        for target in targets:
            there = _layer(target)
            if module != "cpstore" and (there is None or (here is not None and there > here)):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_import_cycle_between_modules() -> None:
    """The module graph (TYPE_CHECKING and function-level imports included) is acyclic."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert cycles == []


def test_no_module_is_longer_than_the_limit() -> None:
    """Every module reads in one sitting: at most MAX_LINES lines."""
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_only_the_lmdb_backend_imports_lmdb() -> None:
    """The engine stays behind the seam: no module outside the LMDB backend imports lmdb."""
    users = {
        m
        for m, p in MODULES.items()
        if any(i == "lmdb" or i.startswith("lmdb.") for i in _imports(m, p))
    }
    assert users <= LMDB_MODULES


def test_only_the_postgres_backend_imports_psycopg() -> None:
    """psycopg and psycopg_pool are imported only by cpstore/store/pg_*.py (an optional extra)."""
    users = {
        m
        for m, p in MODULES.items()
        if any(i.split(".")[0] in ("psycopg", "psycopg_pool") for i in _imports(m, p))
    }
    assert users == PG_MODULES


def test_only_the_binding_touches_the_compiled_core() -> None:
    """Exactly one module imports ``cpstore._cpstore_native`` (the cffi ``ffi``/``lib``)."""
    users = {m for m, p in MODULES.items() if "cpstore._cpstore_native" in _imports(m, p)}
    assert users == {"cpstore.native.binding"}


def test_only_the_langgraph_room_imports_langgraph() -> None:
    """LangGraph is an optional extra: only ``cpstore.langgraph`` and its CLI module import it."""
    users = {
        m
        for m, p in MODULES.items()
        if any(i == "langgraph" or i.startswith("langgraph.") for i in _imports(m, p))
    }
    assert {u for u in users if not u.startswith("cpstore.langgraph")} <= LANGGRAPH_CLI

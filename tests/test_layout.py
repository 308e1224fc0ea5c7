"""The layout's rules (ARCHITECTURE.md), read from the package's import statements.

For who may import whom, every import counts, at module level or inside a
function, absolute or relative: a lazy import of another edge is still a
dependency on it. For cycles, what runs at import counts: module-level
imports (a function's own import runs when it is called, after every module
has loaded, which is how ``Store.open`` reaches its SQLite implementation).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "switchboard_local"
EDGES = ("http", "brokers", "mcp", "cli", "dashboard")
DRIVERS = ("sqlite3", "aiosqlite", "psycopg", "psycopg_pool")
# Only the stores touch a database driver: SQLite's three modules, PostgreSQL's two.
DRIVER_MODULES = tuple(f"switchboard_local.core.store.{m}" for m in (
    "sqlite.store", "sqlite.group_commit", "sqlite.checkpoints", "sqlite.migrations", "sqlite.errors",
    "postgres.store", "postgres.pool", "postgres.migrations", "postgres.statements", "postgres.errors"))  # fmt: skip
# Who may name the PostgreSQL store: Store.open picks it (nobody else needs psycopg installed to import).
POSTGRES_IMPORTERS = ("switchboard_local.core.store.opener",)
# Libraries that belong to one edge each; the core uses none of them.
EDGE_LIBRARIES = ("click", "starlette", "uvicorn", "mcp", "redis", "anyio", "pydantic", "sse_starlette", "prometheus_client")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def at_import(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run when the module is imported (``if TYPE_CHECKING:`` blocks never do)."""
    found: list[ast.stmt] = []
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def imports_of(path: Path, *, only_at_import: bool = False) -> set[str]:
    """The modules ``path`` imports (all, or those imported at import), resolved to absolute dotted names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text("utf-8"))
    found: set[str] = set()
    for node in at_import(tree) if only_at_import else ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import todos`
    return found


MODULES = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}
AT_IMPORT = {module_name(p): imports_of(p, only_at_import=True) for p in sorted(PACKAGE.rglob("*.py"))}


def ours(name: str) -> bool:
    return name == "switchboard_local" or name.startswith("switchboard_local.")


def area(name: str) -> str:
    """core, an edge, or 'top' (the package itself, __main__, process)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in (*EDGES, "core")) else "top"


def real_module(name: str) -> str | None:
    """The module a dotted name denotes, or None for a name inside a module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_the_layout_has_the_folders_the_map_names() -> None:
    for folder in ("core", *EDGES):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder
    assert (PACKAGE / "process.py").is_file()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_store_imports_the_database_driver(module: str) -> None:
    drivers = {name for name in MODULES[module] if name.split(".")[0] in DRIVERS}
    if module not in DRIVER_MODULES:
        assert not drivers, f"{module} imports {sorted(drivers)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_store_open_reaches_the_postgresql_store(module: str) -> None:
    if module not in POSTGRES_IMPORTERS and not module.startswith("switchboard_local.core.store.postgres"):
        assert not [n for n in MODULES[module] if n.startswith("switchboard_local.core.store.postgres")], f"{module} imports core/postgres.py"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if area(m) == "core"))
def test_the_core_imports_no_edge_and_no_edge_library(module: str) -> None:
    for name in MODULES[module]:
        if ours(name):
            assert area(name) in ("core", "top") and name != "switchboard_local.process", f"{module} imports {name}"
        else:
            assert name.split(".")[0] not in EDGE_LIBRARIES, f"{module} imports {name}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if area(m) in EDGES))
def test_an_edge_never_imports_another_edge(module: str) -> None:
    own = area(module)
    for name in MODULES[module]:
        if ours(name) and area(name) in EDGES:
            assert area(name) == own, f"{module} ({own}) imports {name}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_cli_and_the_entry_point_start_a_process(module: str) -> None:
    if area(module) != "cli" and module != "switchboard_local.__main__":
        assert "switchboard_local.process" not in MODULES[module], module


def test_there_are_no_import_cycles() -> None:
    graph = {m: {real_module(n) for n in names if ours(n)} - {None, m} for m, names in AT_IMPORT.items()}
    # A package's __init__ is imported by its modules' import machinery, not by choice: leave those edges out.
    graph = {m: {n for n in deps if not m.startswith(f"{n}.")} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):  # type: ignore[type-var]
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, module, dep]))
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])

"""The layout's rules (docs/development/architecture.md), read from the package's import statements.

Every import counts, at module level or inside a function, under ``if
TYPE_CHECKING:`` or not, absolute or relative: a lazy import of another edge
is still a dependency on it, and a circle closed by a function's import (or
a type's) is still a circle: a change to any module on it is a change to all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "switchboard_local"
EDGES = ("http", "brokers", "mcp", "cli", "dashboard")
STORE = "switchboard_local.core.store"
# The store's interface (the Protocols and their contract): what verbs and edges depend on.
INTERFACE = f"{STORE}.interface"
# The one module that picks a backend (by the URL or path it is given).
OPENER = f"{STORE}.opener"
# Each backend's package, and the database drivers only its modules may import.
BACKENDS = {f"{STORE}.sqlite": ("sqlite3", "aiosqlite"), f"{STORE}.postgres": ("psycopg", "psycopg_pool")}
# Libraries that belong to one edge each; the core uses none of them.
EDGE_LIBRARIES = ("click", "starlette", "uvicorn", "mcp", "redis", "anyio", "pydantic", "sse_starlette", "prometheus_client")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it, resolved to absolute dotted names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
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


def ours(name: str) -> bool:
    return name == "switchboard_local" or name.startswith("switchboard_local.")


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


def area(name: str) -> str:
    """core, an edge, or 'top' (the package itself, __main__, process)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in (*EDGES, "core")) else "top"


def real_module(name: str) -> str | None:
    """The module a dotted name denotes, or None for a name inside a module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports. A package's __init__ is imported by its modules'
    import machinery, not by choice: those edges are left out."""
    deps = {m: {real_module(n) for n in names if ours(n)} - {None, m} for m, names in MODULES.items()}
    return {m: {n for n in found if n is not None and not m.startswith(f"{n}.")} for m, found in deps.items()}


def reached(start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    edges, seen, pending = graph(), set(), [start]
    while pending:
        for dep in edges[pending.pop()] - seen:
            seen.add(dep)
            pending.append(dep)
    return seen


def test_the_layout_has_the_folders_the_map_names() -> None:
    for folder in ("core", *EDGES, "core/store", "core/store/sqlite", "core/store/postgres"):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder
    assert (PACKAGE / "process.py").is_file()
    assert INTERFACE in MODULES and OPENER in MODULES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_a_store_backend_imports_its_database_driver(module: str) -> None:
    for backend, drivers in BACKENDS.items():
        used = {name for name in MODULES[module] if name.split(".")[0] in drivers}
        assert not used or within(module, backend), f"{module} imports {sorted(used)}, which only {backend} may"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_opener_reaches_a_store_backend(module: str) -> None:
    """The one-way door: verbs and edges see the interface; the opener picks the backend (and nobody
    else needs psycopg installed to import); a backend never names the other."""
    for backend in BACKENDS:
        if module != OPENER and not within(module, backend):
            reaching = sorted(n for n in MODULES[module] if within(n, backend))
            assert not reaching, f"{module} imports {reaching}"


def test_the_store_interface_imports_none_of_its_implementations() -> None:
    assert INTERFACE in MODULES, f"no {INTERFACE}"
    assert OPENER not in reached(INTERFACE)
    for backend in BACKENDS:
        assert not [m for m in reached(INTERFACE) if within(m, backend)], f"{INTERFACE} reaches {backend}"


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
    edges = graph()
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(edges[module]):
            if state.get(dep) == 1:
                cycle = [*path, module, dep]
                found.append(" -> ".join(cycle[cycle.index(dep) :]))
            elif dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not found, "import cycles:\n" + "\n".join(found)

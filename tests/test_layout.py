"""The layout's rules (docs/development/architecture.md), read from the package's import statements.

Every import counts, at module level or inside a function, under ``if
TYPE_CHECKING:`` or not, absolute or relative: a lazy import of another edge
is still a dependency on it, and a circle closed by a function's import (or
a type's) is still a circle: a change to any module on it is a change to all.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# ---------------------------------------------------------------- no broker named outside brokers/

# The words that name a broker. Outside brokers/ the package may hold them only where they document
# (docstrings, comments, SQL comments): the core and the other edges know a neutral queue family
# (core/adapters.py), and what is particular to a broker is asked of its entry in brokers/registry.py.
BROKER_WORDS = re.compile(r"redis|nats|amqp|sqs", re.IGNORECASE)
# (file, the text that names one) allowed besides, each for its reason. Nothing else; and each of these
# must still be there (a stale allowance fails too).
ALLOWED_BROKER_WORDS = {
    # Migration 10 rewrites what versions before the registry stored in the only broker's name: the derived
    # keys' old prefix and the URL's old config keys. A migration names the past it converts.
    ("core/store/sqlite/migrations.py", "event:redis:"),
    ("core/store/sqlite/migrations.py", "redis_url"),
    ("core/store/sqlite/migrations.py", "redis_url_env"),
    ("core/store/postgres/migrations.py", "event:redis:"),
    ("core/store/postgres/migrations.py", "redis_url"),
    ("core/store/postgres/migrations.py", "redis_url_env"),
}


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    """Where each docstring starts (line, column): the first statement of a module, class or function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add((first.lineno, first.col_offset))
    return found


def _named_in_python(path: Path) -> list[str]:
    """The code (not docstrings, not comments) in ``path`` that names a broker: each token that does."""
    text = path.read_text("utf-8")
    docs = _docstrings(ast.parse(text))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start in docs):
            continue
        for match in BROKER_WORDS.finditer(token.string):
            found.append(_word_around(token.string, match))
    return found


def _named_in_text(path: Path) -> list[str]:
    """A template, a script or SQL: every naming of a broker, but in an SQL comment."""
    found = []
    for line in path.read_text("utf-8").splitlines():
        if path.suffix == ".sql":
            line = line.split("--", 1)[0]
        found += [_word_around(line, m) for m in BROKER_WORDS.finditer(line)]
    return found


def _word_around(text: str, match: re.Match[str]) -> str:
    """The run of name-like characters holding the match (``redis_url``, ``event:redis:``)."""
    start, end = match.start(), match.end()
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_:"):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] in "_:"):
        end += 1
    return text[start:end]


def test_no_module_outside_brokers_names_a_broker_but_in_its_documentation() -> None:
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if not path.is_file() or relative.parts[0] == "brokers" or "__pycache__" in relative.parts:
            continue
        if path.suffix == ".py":
            named = _named_in_python(path)
        elif path.suffix in (".sql", ".html", ".js", ".css", ".txt", ".md"):
            named = _named_in_text(path)
        else:
            continue
        found |= {(relative.as_posix(), word) for word in named}
    named = "\n".join(f"{file}: {word}" for file, word in sorted(found - ALLOWED_BROKER_WORDS))
    assert not named, f"a broker named outside brokers/ (the core and the other edges ask the registry):\n{named}"
    stale = sorted(ALLOWED_BROKER_WORDS - found)
    assert not stale, f"allowed but no longer there (take them out of ALLOWED_BROKER_WORDS): {stale}"

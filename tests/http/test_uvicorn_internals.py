"""What http/limits.py relies on inside uvicorn, checked against the installed uvicorn.

limits.py subclasses uvicorn's private HttpToolsProtocol (its parser callbacks,
`cycle`, `pipeline`, `flow`) and overrides hooks of uvicorn.Server; nothing
upstream promises those stay as they are, so pyproject.toml pins uvicorn to the
minor version they were read from. When the pin moves, these tests name what
changed (a callback's parameters, an attribute no longer set, a name uvicorn
now uses that limits.py's own would hide) before a limit stops holding without
a word. What limits.py uses is read from its own source, so a new use is
checked as well; the limits' behaviour itself is test_limits.py's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from types import ModuleType
from typing import Any

import pytest
import uvicorn

IMPL = "uvicorn.protocols.http.httptools_impl"


def changed(owner: str, name: str, how: str) -> str:
    return (
        f"uvicorn {uvicorn.__version__} changed {owner}.{name} ({how}): http/limits.py relies on it; "
        "re-check the limits against the new version"
    )


def impl() -> ModuleType:
    try:
        return importlib.import_module(IMPL)
    except ImportError as exc:
        pytest.fail(changed(IMPL, "HttpToolsProtocol", f"the module cannot be imported: {exc}"))


def limits() -> ModuleType:
    impl()  # its failure, named, before limits.py's own import error
    from switchboard_local.http import limits

    return limits


def source_of(obj: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


def assigned_in(cls: type) -> set[str]:
    """The attributes the class's own methods set on self."""
    names: set[str] = set()
    for node in ast.walk(source_of(cls)):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            for part in ast.walk(target) if target is not None else ():
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                    names.add(part.attr)
    return names


def has(cls: type, name: str) -> bool:
    """A method or class attribute of ``cls``, or an attribute one of its classes sets on self."""
    return hasattr(cls, name) or any(name in assigned_in(klass) for klass in cls.__mro__[:-1])


def used_on(tree: ast.AST, *owners: str) -> set[str]:
    """The attribute names read or set on any of ``owners`` (as written: "self", "self.cycle", "cycle")."""
    return {
        node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and ast.unparse(node.value) in owners
    }


def parameters(cls: type, name: str) -> str | None:
    """The parameters of method ``name`` as the source of ``cls`` (or of its first class that has it) defines it.

    Read from the source, not the live function: sse-starlette, imported by the dashboard,
    replaces uvicorn.Server.handle_exit with a wrapper taking (*args, **kwargs).
    """
    for klass in cls.__mro__[:-1]:
        for node in ast.walk(source_of(klass)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                a = node.args
                return ", ".join(
                    [p.arg for p in a.posonlyargs + a.args]
                    + ([f"*{a.vararg.arg}"] if a.vararg else ["*"] if a.kwonlyargs else [])
                    + [p.arg for p in a.kwonlyargs]
                    + ([f"**{a.kwarg.arg}"] if a.kwarg else [])
                )
    return None


def changes(base: type, ours: type, through: tuple[tuple[str, type], ...] = ()) -> list[str]:
    """What of ``base`` the subclass ``ours`` relies on and ``base`` no longer offers as it did.

    ``through``: (an attribute of ``base``, say "cycle"; the class it holds): what ``ours``
    uses on it (``self.cycle.x``, or ``cycle.x`` after ``cycle = self.cycle``) is checked there.
    """
    tree = source_of(ours)
    touched = used_on(tree, "self")
    # Its own: private names, and what it adds that is not a method (its `limits`).
    own = {
        name
        for name in touched | set(vars(ours))
        if not name.startswith("__")
        and (name.startswith("_") or name in vars(ours) and not inspect.isfunction(vars(ours)[name]))
    }
    overridden = {name for name, value in vars(ours).items() if inspect.isfunction(value) and not name.startswith("_")}
    found: list[str] = []
    for name in sorted(overridden):
        theirs, mine = parameters(base, name), parameters(ours, name)
        if theirs is None:
            found.append(changed(base.__name__, name, "no longer there"))
        elif theirs != mine:
            found.append(changed(base.__name__, name, f"now takes ({theirs}), limits.py's override ({mine})"))
    for name in sorted(own):
        if has(base, name):
            found.append(changed(base.__name__, name, "uvicorn's own now, which limits.py's would hide"))
    for name in sorted(touched - own - overridden):
        if not has(base, name):
            found.append(changed(base.__name__, name, "no longer set"))
    for attribute, held in through:
        for name in sorted(used_on(tree, f"self.{attribute}", attribute)):
            if not has(held, name):
                found.append(changed(held.__name__, name, f"no longer set on what {base.__name__}.{attribute} holds"))
    return found


def test_the_protocol_limits_py_subclasses_still_offers_what_it_relies_on() -> None:
    http = impl()
    guarded = limits()._GuardedProtocol
    base = http.HttpToolsProtocol
    assert guarded.__bases__ == (base,)
    through = (("cycle", http.RequestResponseCycle), ("flow", http.FlowControl))
    found = changes(base, guarded, through)
    assert not found, "\n".join(found)
    # What the check covered (read from limits.py): not nothing, the callbacks and state it is there for.
    assert {"cycle", "pipeline", "flow", "connections", "transport"} <= used_on(source_of(guarded), "self")
    assert {"data_received", "on_headers_complete", "on_message_complete", "shutdown"} <= set(vars(guarded))


def test_the_server_hooks_limits_py_overrides_are_still_uvicorns() -> None:
    served = limits()
    found = changes(uvicorn.Server, served._Server) + changes(uvicorn.Server, served._QuietServer)
    assert not found, "\n".join(found)


def test_every_option_limits_py_gives_uvicorns_config_is_still_one() -> None:
    given = {
        keyword.arg
        for node in ast.walk(source_of(limits().server))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "uvicorn.Config"
        for keyword in node.keywords
    }
    assert {"http", "limit_concurrency", "timeout_graceful_shutdown"} <= given
    accepted = inspect.signature(uvicorn.Config).parameters
    found = [changed("Config", name, "no longer an option") for name in sorted(given - set(accepted))]
    assert not found, "\n".join(found)


# A later uvicorn as it might be: the pipeline renamed, on_body given another parameter,
# a method named like one of limits.py's own, and the cycle's `disconnected` gone.
class LaterFlow:
    def pause_reading(self) -> None: ...


class LaterCycle:
    def __init__(self) -> None:
        self.response_complete = self.response_started = self.keep_alive = False
        self.message_event = None
        self.gone = False


class LaterProtocol:
    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.url, self.headers, self.loop, self.transport, self.client = b"", [], None, None, None
        self.cycle: LaterCycle | None = None
        self.flow = LaterFlow()
        self.queued: list[Any] = []

    def connection_made(self, transport: Any) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def on_message_begin(self) -> None: ...
    def on_headers_complete(self) -> None: ...
    def on_body(self, body: bytes, more: bool) -> None: ...
    def on_message_complete(self) -> None: ...
    def shutdown(self) -> None: ...
    def _refuse(self) -> None: ...


def test_a_later_uvicorn_that_moved_what_limits_py_relies_on_is_named_in_the_failure() -> None:
    found = changes(LaterProtocol, limits()._GuardedProtocol, (("cycle", LaterCycle), ("flow", LaterFlow)))
    version = uvicorn.__version__
    expected = [
        f"uvicorn {version} changed LaterProtocol.on_body (now takes (self, body, more), limits.py's override (self, body))",
        f"uvicorn {version} changed LaterProtocol._refuse (uvicorn's own now, which limits.py's would hide)",
        f"uvicorn {version} changed LaterProtocol.pipeline (no longer set)",
        f"uvicorn {version} changed LaterCycle.disconnected (no longer set on what LaterProtocol.cycle holds)",
    ]
    for start in expected:
        assert any(line.startswith(start) and line.endswith("re-check the limits against the new version")
                   for line in found), (start, found)  # fmt: skip
    assert len(found) == len(expected), found

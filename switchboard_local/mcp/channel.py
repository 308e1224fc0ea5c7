"""Where the MCP edge reaches below MCPServer's public surface, in one place.

MCPServer (SDK 2.3) cannot advertise an experimental capability, it
prefixes every tool error with "Error executing tool NAME:", which would bury
the stable code the model branches on, and it sends each answer twice (as
structured content and as indented JSON text). So this module, and only this
one, touches the low-level server: it serves stdio with the ``claude/channel``
capability and installs a ``tools/call`` handler that answers and maps errors
once (answers.py says how). It
also defines the channel notification and the doorbell that sends it through
the session captured when the client says it is initialized, and answers the
lines the SDK's stdio transport cannot read (which it would drop silently).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal

import anyio
from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ..core.errors import SwitchboardError
from .answers import answer, refusal
from .stdio import Lines, Overlong, stdio_wire
from .wire import (
    INVALID_REQUEST,
    Answer,
    Verdict,
    judge,
    judge_notification,
    transport_reason,
)

logger = logging.getLogger("switchboard_local.mcp")

CHANNEL_CAPABILITY = "claude/channel"
CHANNEL_METHOD = "notifications/claude/channel"


class ChannelNotification(types.Notification[dict[str, Any], Literal["notifications/claude/channel"]]):
    """Claude Code's channel message: ``{"content": str, "meta": {str: str}}``."""

    method: Literal["notifications/claude/channel"] = CHANNEL_METHOD


class Doorbell:
    """Pushes channel messages to the client of one connection.

    Holds the session seen with ``notifications/initialized``: pushing
    outside any request needs one, and before that the client is not ready.
    """

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self._session: ServerSession | None = None

    def attach(self, session: ServerSession) -> None:
        if self._session is None:
            self._session = session
            self.ready.set()

    async def ring(self, content: str, meta: dict[str, str]) -> None:
        assert self._session is not None, "ring() before the client is initialized"
        await self._session.send_notification(ChannelNotification(params={"content": content, "meta": meta}))  # type: ignore[arg-type]


async def capture_session(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: hand the session to the connection's doorbell once initialized."""
    result = await call_next(ctx)
    if ctx.method == "notifications/initialized":
        doorbell = getattr(ctx.lifespan_context, "doorbell", None)
        if isinstance(doorbell, Doorbell):
            doorbell.attach(ctx.session)
    return result


def answer_tool_calls(server: MCPServer[Any], tools: Mapping[str, Tool]) -> None:
    """Answer tools/call with ``tools``: each answer's JSON once (answers.py), each failure a refusal with a code.

    ``not_found``, ``conflict``, ``invalid_argument`` and ``forbidden`` come
    from the core's errors (and from argument validation, and for a tool this
    server does not offer), ``busy``, ``unavailable`` and ``store_unusable``
    from the store's; anything unexpected is logged on stderr and answered as
    ``internal_error`` without its details.
    """

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        tool = tools.get(params.name)
        if tool is None:
            return refusal("not_found", f"there is no tool named {params.name!r}")
        context = Context(request_context=ctx, mcp_server=server, input_params=params)
        try:
            return answer(params.name, await tool.run(params.arguments or {}, context))
        except MCPError:
            raise
        except ToolError as exc:
            return refusal(*_refused(params.name, exc))
        except Exception:
            logger.exception("%s: its answer could not be made", params.name)
            return refusal(*_UNEXPECTED)

    server._lowlevel_server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)


_UNEXPECTED = ("internal_error", "the tool failed unexpectedly; the server's log (stderr) has the details")


def _refused(tool: str, exc: ToolError) -> tuple[str, str]:
    """The code and message a failed call is answered with."""
    cause = exc.__cause__
    if isinstance(cause, SwitchboardError):
        logger.info("%s refused: %s", tool, cause)
        return cause.code, cause.message
    if isinstance(cause, ValidationError):
        # Field names and what is wrong with them; never the rejected values.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in cause.errors()
        )
        return "invalid_argument", problems
    logger.error("%s failed unexpectedly", tool, exc_info=cause or exc)
    return _UNEXPECTED


class AnsweringReads:
    """The stdio transport's read stream, with every line it could not read answered.

    The SDK's transport turns each line into exactly one item, in order: the
    message, or the exception refusing it raised, which the server would only
    log at debug level. So each item is paired here with its line (kept by
    Lines) and a refused line is judged (wire.py): its JSON-RPC error goes
    out through the transport's own writer, so every line on stdout stays
    whole, or for a notification one line goes to stderr. A "notification"
    that has an id (of a type no request id may have) is answered too.
    """

    def __init__(self, inner: Any, lines: Lines, answers: Any) -> None:
        self._inner = inner
        self._lines = lines
        self._answers = answers

    @property
    def last_context(self) -> Any:  # the sender's context, which the server reads after each item
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            line = self._lines.read.popleft()
            try:
                verdict = _verdict(item, line)
            except Exception:  # a fault in judging costs one line, never the connection
                logger.exception("could not judge a line from the client")
                if not isinstance(item, Exception):
                    return item
                verdict = Answer(None, INVALID_REQUEST, "Invalid Request: the line could not be read")
            if verdict is None:
                return item
            logger.warning("%s", verdict.log)
            if isinstance(verdict, Answer):
                await self._answer(verdict)

    async def _answer(self, answer: Answer) -> None:
        error = types.JSONRPCError(
            jsonrpc="2.0", id=answer.id, error=types.ErrorData(code=answer.code, message=answer.message)
        )
        try:
            await self._answers.send(SessionMessage(error))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the client is gone; the server is ending

    def __aiter__(self) -> AnsweringReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> AnsweringReads:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _verdict(item: SessionMessage | Exception, line: str | Overlong) -> Verdict | None:
    """What a line gets beyond the transport's reading of it (None: nothing, it is served)."""
    if isinstance(item, Exception):
        return judge(line, transport_reason(item))
    if isinstance(item.message, types.JSONRPCNotification) and isinstance(line, str):
        return judge_notification(line)
    return None


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve one client over stdin/stdout, advertising the channel capability."""
    lowlevel = server._lowlevel_server
    options = lowlevel.create_initialization_options(experimental_capabilities={CHANNEL_CAPABILITY: {}})
    async with stdio_wire() as (lines, stdout):  # stdout None: the SDK's own stream
        async with stdio_server(lines, stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
            await lowlevel.run(AnsweringReads(read_stream, lines, write_stream), write_stream, options)

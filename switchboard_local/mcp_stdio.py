"""stdin and stdout for the MCP server, read and written by the event loop itself.

The SDK's stdio transport reads each line and writes (and flushes) each
answer through a worker thread: several thread hops per tool call, about a
millisecond of a claim_next + complete round trip. When both ends are pipes
(as Claude Code launches us), these streams serve the same SDK transport
straight from asyncio's pipe transports instead. Anything else (a regular
file, a terminal) falls back to the SDK's own streams.

Like the SDK, the server claims the wire while it runs: fd 0 reads the null
device and fd 1 writes to stderr, so a stray print or a child process can
never corrupt the JSON-RPC stream; both are restored on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator

# The SDK reads lines of any length; asyncio's default cap is 64 KiB.
MAX_LINE = 256 * 1024 * 1024


class PipeLines:
    """stdin as the async iterator of text lines the SDK's transport reads."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


class PipeWriter:
    """stdout as the SDK's transport writes it: write a line, then flush."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def pipe_streams() -> AsyncIterator[tuple[PipeLines, PipeWriter] | None]:
    """The wire as loop-driven streams, or None when stdin or stdout is not a pipe."""
    if not (_is_pipe(0) and _is_pipe(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    # The transports own (and close) one copy of each end; another restores fds 0 and 1.
    wire_in, saved_in = (fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3) for _ in range(2))
    wire_out, saved_out = (fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3) for _ in range(2))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin_file = os.fdopen(wire_in, "rb", buffering=0)
    stdout_file = os.fdopen(wire_out, "wb", buffering=0)
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=MAX_LINE)
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin_file)
        transports.append(read_transport)
        write_transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout_file)
        transports.append(write_transport)
        writer = asyncio.StreamWriter(write_transport, protocol, reader, loop)
        yield PipeLines(reader), PipeWriter(writer)
    finally:
        for saved, fd in ((saved_in, 0), (saved_out, 1)):  # the wire back, blocking as it came
            os.dup2(saved, fd)
            os.close(saved)
            os.set_blocking(fd, True)
        for transport in transports:
            transport.close()  # closes its file once what it buffered is written
        for file in (stdin_file, stdout_file)[len(transports) :]:
            file.close()

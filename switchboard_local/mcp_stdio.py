"""stdin and stdout for the MCP server, read and written by the event loop itself.

The SDK's stdio transport reads each line and writes (and flushes) each
answer through a worker thread: several thread hops per tool call, about a
millisecond of a claim_next + complete round trip. When the two ends are
separate pipes or sockets (as Claude Code launches us), these streams serve
the same SDK transport straight from asyncio's pipe transports instead.
Anything else (a regular file, a terminal, one socket for both, Windows)
falls back to the SDK's own streams.

Like the SDK, the server claims the wire while it runs: fd 0 reads the null
device and fd 1 writes to stderr, so a stray print or a child process can
never corrupt the JSON-RPC stream; both are restored on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator

# The SDK reads lines of any length; asyncio's default cap is 64 KiB.
MAX_LINE = 256 * 1024 * 1024
EOF_GRACE_SECONDS = 0.05


class PipeLines:
    """stdin as the async iterator of text lines the SDK's transport reads."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            # The client hung up. Let the requests read just before get their
            # answers started, as the SDK's thread-per-line reader lets them.
            await asyncio.sleep(EOF_GRACE_SECONDS)
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


def _separate_pipes() -> bool:
    """stdin and stdout are pipes or sockets (as launchers make them), and not one
    socket for both: asyncio's write transport takes readable data on its own fd
    for the peer closing it."""
    if sys.platform == "win32":
        return False
    stdin, stdout = os.fstat(0), os.fstat(1)
    pipes = all(stat.S_ISFIFO(s.st_mode) or stat.S_ISSOCK(s.st_mode) for s in (stdin, stdout))
    return pipes and not os.path.samestat(stdin, stdout)


@contextlib.asynccontextmanager
async def pipe_streams() -> AsyncIterator[tuple[PipeLines, PipeWriter] | None]:
    """The wire as loop-driven streams, or None when it is not two pipes."""
    if not _separate_pipes():
        yield None
        return
    import fcntl  # POSIX only, like this path

    loop = asyncio.get_running_loop()
    # The transports own (and close) one copy of each end; another restores fds 0 and 1.
    stdin_file = os.fdopen(fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), "rb", buffering=0)
    stdout_file = os.fdopen(fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3), "wb", buffering=0)
    saved: list[tuple[int, int]] = []
    transports: list[asyncio.BaseTransport] = []
    try:
        for fd in (0, 1):
            saved.append((fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3), fd))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        reader = asyncio.StreamReader(limit=MAX_LINE)
        read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin_file)
        transports.append(read_transport)
        write_transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout_file)
        transports.append(write_transport)
        write_transport.set_write_buffer_limits(high=0)  # flush() returns once all of it is written
        yield PipeLines(reader), PipeWriter(asyncio.StreamWriter(write_transport, protocol, None, loop))
    finally:
        for transport in transports:
            transport.close()  # every answer was written whole: flush() waited for it
        for file in (stdin_file, stdout_file)[len(transports) :]:
            file.close()
        for copy, fd in saved:  # the wire back on fds 0 and 1, blocking as it came
            os.dup2(copy, fd)
            os.close(copy)
            os.set_blocking(fd, True)

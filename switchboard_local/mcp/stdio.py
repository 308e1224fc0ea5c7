"""stdin and stdout for the MCP server, read and written by the event loop itself.

The SDK's stdio transport reads each line and writes (and flushes) each
answer through a worker thread: several thread hops per tool call, about a
millisecond of a claim_next + complete round trip. When the two ends are
separate pipes or sockets (as Claude Code launches us), these streams serve
the same SDK transport straight from asyncio's pipe transports instead.
Anything else (a regular file, a terminal, one socket for both, Windows)
reads stdin from a worker thread and leaves stdout to the SDK's own stream.

Either way the lines are read here, so that none goes unanswered: each line
handed to the transport is also kept, in order, until the server has judged
what the transport made of it (channel.py), and a line over MAX_LINE bytes
is skipped as it streams in, keeping only its size and its ends (where its
id is), instead of being held whole or ending the server.

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
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import anyio

# One JSON-RPC message per line, at most this many bytes (the newline aside).
# Payloads and results are capped far below it; a longer line is answered
# with an error and skipped, never held whole.
MAX_LINE = 16 * 1024 * 1024
KEPT_ENDS = 1024  # bytes of an overlong line's start and end, where its id is
SKIP_CHUNK = 1024 * 1024
EOF_GRACE_SECONDS = 0.05


@dataclass(frozen=True)
class Overlong:
    """A line over MAX_LINE bytes, dropped as it was read: its size and its two ends."""

    size: int
    head: str
    tail: str


RawLine = bytes | Overlong


class Lines:
    """stdin as the async iterator of text lines the SDK's transport reads.

    Every line handed on is also appended to ``read``, for the server to pair
    with what the transport made of it. An overlong line is handed on as an
    empty line (which the transport refuses) and kept as its Overlong record.
    """

    def __init__(self, next_line: Callable[[], Awaitable[RawLine]]) -> None:
        self._next_line = next_line
        self.read: deque[str | Overlong] = deque()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        raw = await self._next_line()
        if raw == b"":
            # The client hung up. Let the requests read just before get their
            # answers started, as the SDK's thread-per-line reader lets them.
            await anyio.sleep(EOF_GRACE_SECONDS)
            raise StopAsyncIteration
        if isinstance(raw, Overlong):
            self.read.append(raw)
            return ""
        text = raw.decode("utf-8", "replace")
        self.read.append(text)
        return text


class _Skipped:
    """An overlong line as it streams past: its size and its ends, never the whole."""

    def __init__(self) -> None:
        self.size = 0
        self.head = b""
        self.tail = b""

    def add(self, chunk: bytes) -> None:
        if len(self.head) < KEPT_ENDS:
            self.head += chunk[: KEPT_ENDS - len(self.head)]
        self.tail = (self.tail + chunk[-KEPT_ENDS:])[-KEPT_ENDS:]
        self.size += len(chunk)

    def record(self) -> Overlong:
        end = len(self.tail.rstrip(b"\r\n"))
        size = self.size - (len(self.tail) - end)
        return Overlong(size, self.head.decode("utf-8", "replace"), self.tail[:end].decode("utf-8", "replace"))


async def _read_pipe_line(reader: asyncio.StreamReader) -> RawLine:
    """The next line with its newline (without one at the end of input, b"" after it)."""
    skipped: _Skipped | None = None
    while True:
        try:
            chunk, whole = await reader.readuntil(b"\n"), True
        except asyncio.IncompleteReadError as exc:
            chunk, whole = exc.partial, True  # the input ended
        except asyncio.LimitOverrunError as exc:
            # Over the limit, and the reader kept it all: take what it has, find the end.
            chunk, whole = await reader.readexactly(exc.consumed), False
            skipped = skipped or _Skipped()
        if skipped is None:
            return chunk
        skipped.add(chunk)
        if whole:
            return skipped.record()


def _read_file_line(file: BinaryIO) -> RawLine:
    """As _read_pipe_line, from a blocking file (in a worker thread)."""
    line = file.readline(MAX_LINE + 1)
    if len(line) <= MAX_LINE or line.endswith(b"\n"):
        return line
    skipped = _Skipped()
    skipped.add(line)
    while True:
        chunk = file.readline(SKIP_CHUNK)
        skipped.add(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped.record()


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


def _dup_above_std(fd: int) -> int:
    """A private, non-inheritable copy of ``fd`` that cannot land on 0, 1 or 2."""
    if sys.platform == "win32":
        return os.dup(fd)
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


@contextlib.asynccontextmanager
async def stdio_wire() -> AsyncIterator[tuple[Lines, PipeWriter | None]]:
    """stdin as Lines, and stdout as a PipeWriter, or None for the SDK's own stream."""
    if _separate_pipes():
        async with _pipe_streams() as streams:
            yield streams
    else:
        with _claimed_stdin() as stdin:
            yield Lines(lambda: anyio.to_thread.run_sync(_read_file_line, stdin, abandon_on_cancel=True)), None


@contextlib.contextmanager
def _claimed_stdin() -> Iterator[BinaryIO]:
    """The wire read from a private copy of fd 0 while fd 0 reads the null device."""
    private = _dup_above_std(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        # Never closed: a worker thread may still be blocked reading it (a
        # terminal) when the server ends, and a recycled fd would be read instead.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


@contextlib.asynccontextmanager
async def _pipe_streams() -> AsyncIterator[tuple[Lines, PipeWriter]]:
    """The wire as loop-driven streams (stdin and stdout are two pipes or sockets)."""
    loop = asyncio.get_running_loop()
    # The transports own (and close) one copy of each end; another restores fds 0 and 1.
    stdin_file = os.fdopen(_dup_above_std(0), "rb", buffering=0)
    stdout_file = os.fdopen(_dup_above_std(1), "wb", buffering=0)
    saved: list[tuple[int, int]] = []
    transports: list[asyncio.BaseTransport] = []
    try:
        for fd in (0, 1):
            saved.append((_dup_above_std(fd), fd))
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
        lines = Lines(lambda: _read_pipe_line(reader))
        yield lines, PipeWriter(asyncio.StreamWriter(write_transport, protocol, None, loop))
    finally:
        for transport in transports:
            transport.close()  # every answer was written whole: flush() waited for it
        for file in (stdin_file, stdout_file)[len(transports) :]:
            file.close()
        for copy, fd in saved:  # the wire back on fds 0 and 1, blocking as it came
            os.dup2(copy, fd)
            os.close(copy)
            os.set_blocking(fd, True)

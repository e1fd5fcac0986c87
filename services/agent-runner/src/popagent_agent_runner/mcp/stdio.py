"""A user's stdio MCP server, run in the workspace shell's sandbox (`workspace/sandbox.py`).

The command runs under bubblewrap with no network namespace of the host (only the sandbox's own
loopback), the system folders and this service's interpreter read-only, a fresh empty folder of
its own as its only writable place and working directory, and the sandbox's allow-listed
environment (PATH, LANG, HOME, TERM): never this service's (no DATABASE_URL, no keys). JSON-RPC
goes over its stdin and stdout, one message a line; its stderr is kept as a short tail for the
error a failed start reports. The server dies with its connection, and with this service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from popagent_agent_runner.workspace.sandbox import Sandbox

logger = logging.getLogger(__name__)

# One JSON-RPC message (one line) from the server; a longer one breaks the connection.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 4096


class StdioServer:
    """The running server's stderr tail, for the reason a broken connection reports."""

    def __init__(self) -> None:
        self.stderr = bytearray()

    def tail(self) -> str:
        return self.stderr.decode(errors="replace").strip()[-1000:]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


@contextlib.asynccontextmanager
async def sandboxed_stdio(
    sandbox: Sandbox, program: Sequence[str], server: StdioServer | None = None
) -> AsyncIterator[TransportStreams]:
    """The server's JSON-RPC streams while the block runs; the server is killed when it ends."""
    server = server or StdioServer()
    folder = tempfile.mkdtemp(prefix="popagent-mcp-")

    async def spawn(argv: Sequence[str], **options: Any) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=MAX_MESSAGE_BYTES,
            **options,
        )

    try:
        root_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            sandboxed = await sandbox.start_tool_server(root_fd, Path(folder), list(program), spawn=spawn)
        finally:
            os.close(root_fd)
        process = sandboxed.proc
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_stdout() -> None:
            async with incoming_writer:
                while True:
                    try:
                        line = await stdout.readline()
                    except (ValueError, ConnectionError) as exc:
                        await incoming_writer.send(ValueError(f"the server's output broke: {exc}"))
                        return
                    if not line:
                        return  # the server exited: the session sees its stream end
                    if line.strip():
                        await incoming_writer.send(_parse(line))

        async def write_stdin() -> None:
            async with outgoing_reader:
                async for message in outgoing_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    try:
                        stdin.write(data.encode())
                        await stdin.drain()
                    except (ConnectionError, OSError):
                        await incoming_writer.aclose()
                        return

        async def drain_stderr() -> None:
            while chunk := await stderr.read(4096):
                server.stderr.extend(chunk)
                del server.stderr[:-STDERR_TAIL_BYTES]

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read_stdout)
                tasks.start_soon(write_stdin)
                tasks.start_soon(drain_stderr)
                try:
                    yield incoming, outgoing
                finally:
                    sandboxed.kill()
                    tasks.cancel_scope.cancel()
        finally:
            sandboxed.kill()
            with contextlib.suppress(Exception), anyio.CancelScope(shield=True):
                await sandboxed.exited(2.0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

"""The real MCP browser server the browser tests put behind the BifrOSt socket, and its test site.

- `BrowserPeer`: `@playwright/mcp` (pinned in tests/browser_peer/package-lock.json, installed by
  `make setup`) driving Debian's chromium headless, on a loopback port, exposed on a Unix socket
  (mode 0600) by a small relay: `@playwright/mcp` cannot listen on a socket itself. It can be
  killed and started again on the same socket (the relay stays), as a user restarting BifrOSt.
- `LoginSite`: HTTPS servers on two loopback ports (two origins) and a plain HTTP one, with a
  login form, a page framing the other origin, a redirect, and a page that opens popups.
  Chromium resolves every host name to 127.0.0.1 (`--host-resolver-rules`), so look-alike host
  names (`login.test.evil.test`, an IDN homograph, a trailing dot) reach the same servers under other origins; certificates are
  not checked (`--ignore-https-errors`), as a look-alike site would have a valid one of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import ssl
import sys
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme

from popagent_dev.embedded import free_port

PEER_DIR = Path(__file__).resolve().parent.parent / "browser_peer"
CLI = PEER_DIR / "node_modules" / "@playwright" / "mcp" / "cli.js"
CHROMIUM = "/usr/bin/chromium"
# The Host the bridge sends over the socket (its default MCP URL is http://127.0.0.1:8000/mcp).
SOCKET_HOST = "127.0.0.1:8000"
# This machine's network is closed: without these, chromium's own connections are refused by
# the dozen at every start.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * 127.0.0.1",
]

LOGIN_PAGE = """<!doctype html><html><head><title>Sign in</title></head><body>
<h1>Sign in to {origin}</h1>
<form method="post" action="/submit">
<label>User <input name="user" id="user" type="text"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit">Sign in</button>
</form></body></html>"""
FRAMED_PAGE = """<!doctype html><html><head><title>Framed</title></head><body>
<h1>Outer page</h1><iframe src="{child}" width="600" height="300"></iframe></body></html>"""
# A page that opens tabs of its own: a target=_blank link (noopener, as Chromium makes it), a
# window.open, and a window.open on a timer (it opens while another session's call may run).
POPUP_PAGE = """<!doctype html><html><head><title>Opener</title></head><body>
<a href="/login?via=link" target="_blank">New tab link</a>
<button onclick="window.open('/login?via=open')">Open window</button>
<button onclick="setTimeout(() => window.open('/login?via=timer'), 400)">Open later</button>
</body></html>"""
DONE_PAGE = "<!doctype html><html><head><title>Signed in</title></head><body><p>Signed in</p></body></html>"


@dataclass
class Submission:
    host: str
    port: int
    fields: dict[str, str]


@dataclass
class LoginSite:
    """`https://<any host>:<port_a>` and `:<port_b>` (two origins), `http://<any host>:<http_port>`."""

    port_a: int = field(default_factory=free_port)
    port_b: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    submissions: list[Submission] = field(default_factory=list[Submission])
    _servers: list[asyncio.Server] = field(default_factory=list[asyncio.Server])

    def url(self, path: str, host: str = "login.test", port: int | None = None, scheme: str = "https") -> str:
        return f"{scheme}://{host}:{port or self.port_a}{path}"

    async def __aenter__(self) -> LoginSite:
        ca = trustme.CA()
        cert = ca.issue_cert("login.test", "other.test", "127.0.0.1")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        for port, tls in ((self.port_a, context), (self.port_b, context), (self.http_port, None)):
            handler = self._handler(port)
            self._servers.append(await asyncio.start_server(handler, "127.0.0.1", port, ssl=tls))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def _handler(self, port: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                status, extra, payload = self._answer(port, method, target, headers, body)
                response = [f"HTTP/1.1 {status}", "Content-Type: text/html; charset=utf-8", "Connection: close"]
                response += [f"{k}: {v}" for k, v in extra]
                response.append(f"Content-Length: {len(payload)}")
                writer.write(("\r\n".join(response) + "\r\n\r\n").encode() + payload)
                await writer.drain()
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, ssl.SSLError):
                pass
            finally:
                writer.close()

        return handle

    def _answer(
        self, port: int, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        path, _, query = target.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        host = headers.get("host", "")
        scheme = "http" if port == self.http_port else "https"
        if path == "/submit" and method == "POST":
            fields = dict(urllib.parse.parse_qsl(body.decode()))
            self.submissions.append(Submission(host, port, fields))
            return "200 OK", [], DONE_PAGE.encode()
        if path == "/login":
            return "200 OK", [], LOGIN_PAGE.format(origin=f"{scheme}://{host}").encode()
        if path == "/popups":
            return "200 OK", [], POPUP_PAGE.encode()
        if path == "/framed":
            return "200 OK", [], FRAMED_PAGE.format(child=params.get("child", "")).encode()
        if path == "/redirect":
            return "302 Found", [("Location", params.get("to", "/login"))], b""
        return "404 Not Found", [], b"<p>not found</p>"


@dataclass
class BrowserPeer:
    """`@playwright/mcp` on a loopback port, reachable through `socket_path` (mode 0600)."""

    socket_path: Path
    workdir: Path
    codegen: str = "typescript"
    # One browser context for every MCP session (`--shared-browser-context`): the browser, its tabs
    # and their owners outlive a client that disconnects, as a desktop BifrOSt's browser does.
    shared_context: bool = False
    # `--isolated` (a fresh in-memory profile per context); off, the profile lives in the workdir.
    isolated: bool = True
    port: int = field(default_factory=free_port)
    _process: asyncio.subprocess.Process | None = None
    # The relay in a process of its own, as BifrOSt serves its socket from its own process (the
    # benchmark's bare client must not get the socket served by its own event loop).
    relay_process: bool = False
    _relay: asyncio.Server | None = None
    _relay_child: asyncio.subprocess.Process | None = None
    _log: Any = None

    async def __aenter__(self) -> BrowserPeer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await self.start()
        if self.relay_process:
            self._relay_child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "relay", str(self.socket_path), str(self.port)
            )
            while not self.socket_path.exists():
                if self._relay_child.returncode is not None:
                    raise RuntimeError("the socket relay exited")
                await asyncio.sleep(0.02)
        else:
            self._relay = await serve_relay(self.socket_path, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._relay is not None:
            self._relay.close()
        if self._relay_child is not None and self._relay_child.returncode is None:
            self._relay_child.terminate()
            await self._relay_child.wait()
        await self.kill()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def start(self) -> None:
        config = self.workdir / "config.json"
        config.write_text(json.dumps({"browser": {"launchOptions": {"args": CHROMIUM_ARGS}}}))
        self._log = (self.workdir / "peer.log").open("ab")
        self._process = await asyncio.create_subprocess_exec(
            "node",
            str(CLI),
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--allowed-hosts",
            f"{SOCKET_HOST},127.0.0.1:{self.port}",
            "--no-sandbox",
            *(["--isolated"] if self.isolated else ["--user-data-dir", str(self.workdir / "profile")]),
            "--headless",
            "--ignore-https-errors",
            "--executable-path",
            CHROMIUM,
            "--codegen",
            self.codegen,
            "--timeout-settle",
            "50",
            "--config",
            str(config),
            *(["--shared-browser-context"] if self.shared_context else []),
            cwd=self.workdir,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        for _ in range(200):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            if self._process.returncode is not None:
                raise RuntimeError(f"@playwright/mcp exited: {(self.workdir / 'peer.log').read_text()[-2000:]}")
            await asyncio.sleep(0.05)
        raise RuntimeError("@playwright/mcp did not listen")

    async def kill(self) -> None:
        """Stop the server and its chromium (its whole process group), as a crash would."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        if self._log is not None:
            self._log.close()

    async def restart(self) -> None:
        await self.kill()
        await self.start()


@contextlib.asynccontextmanager
async def browser_peer(
    base: Path, codegen: str = "typescript", *, relay_process: bool = False
) -> AsyncIterator[BrowserPeer]:
    async with BrowserPeer(base / "bifrost.sock", base / "peer", codegen=codegen, relay_process=relay_process) as peer:
        yield peer


async def serve_relay(socket_path: Path, port: int) -> asyncio.Server:
    """The Unix socket (mode 0600) relayed to the server's loopback port."""
    server = await asyncio.start_unix_server(functools.partial(_pump, port), path=str(socket_path))
    os.chmod(socket_path, 0o600)
    return server


async def _pump(port: int, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        client_writer.close()
        return

    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    await asyncio.gather(copy(client_reader, server_writer), copy(server_reader, client_writer))


async def _relay_forever(socket_path: Path, port: int) -> None:
    server = await serve_relay(socket_path, port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["relay"]:
    asyncio.run(_relay_forever(Path(sys.argv[2]), int(sys.argv[3])))

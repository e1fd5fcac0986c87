"""Stand-ins for the web the web tools reach, over real HTTP on 127.0.0.1.

- `PageServer`: scripted pages (status, headers, body) by path; it counts every TCP
  connection it accepts, so an SSRF test can prove that none was made.
- `SearxngStandIn`: SearXNG's `/search?format=json` with the documented response shape
  (`query`, `results`, `answers`, `corrections`, `infoboxes`, `suggestions`,
  `unresponsive_engines` as [engine, message] pairs; searx/webutils.py `get_json_response`),
  which can have its JSON format disabled (403, as SearXNG answers when `search.formats`
  lacks json) or be stopped altogether (nothing listens on its port).

One request per connection (`Connection: close`), no request bodies: the tools only GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Self

from popagent_dev.embedded import free_port


@dataclass(frozen=True)
class Page:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0


def redirect(location: str, status: int = 302) -> Page:
    return Page(status, b"", "text/plain", (("Location", location),))


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class PageServer:
    pages: dict[str, Page] = field(default_factory=dict[str, Page])
    connections: int = 0
    requests: list[Seen] = field(default_factory=list[Seen])
    port: int = field(default_factory=free_port)
    _server: asyncio.Server | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def reset(self) -> None:
        self.pages.clear()
        self.requests.clear()
        self.connections = 0

    def answer(self, seen: Seen) -> Page:
        return self.pages.get(seen.path, Page(404, b"not found", "text/plain"))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            target = request_line.split(" ")[1]
            parts = urllib.parse.urlsplit(target)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            seen = Seen(parts.path, dict(urllib.parse.parse_qsl(parts.query)), headers)
            self.requests.append(seen)
            page = self.answer(seen)
            if page.delay_s:
                await asyncio.sleep(page.delay_s)
            lines = [
                f"HTTP/1.1 {page.status} X",
                f"Content-Type: {page.content_type}",
                f"Content-Length: {len(page.body)}",
                "Connection: close",
                *(f"{name}: {value}" for name, value in page.headers),
            ]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + page.body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # The server stopped mid-answer (a client gave up on a slow page); asyncio would log
            # the cancelled handler as an error.
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def searxng_result(title: str, url: str, content: str, engine: str = "duckduckgo", **extra: Any) -> dict[str, Any]:
    """One `results[]` item with the fields a MainResult serializes (searx/result_types/_base.py)."""
    parsed = urllib.parse.urlparse(url)
    return {
        "url": url,
        "engine": engine,
        "parsed_url": list(parsed),
        "template": "default.html",
        "title": title,
        "content": content,
        "img_src": "",
        "iframe_src": "",
        "audio_src": "",
        "thumbnail": "",
        "publishedDate": None,
        "pubdate": "",
        "length": None,
        "views": "",
        "author": "",
        "metadata": "",
        "priority": "",
        "engines": [engine],
        "open_group": False,
        "close_group": False,
        "positions": [1],
        "score": 1.0,
        "category": "general",
        **extra,
    }


@dataclass
class SearxngStandIn(PageServer):
    json_enabled: bool = True
    results: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    answers: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    infoboxes: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    suggestions: list[str] = field(default_factory=list[str])
    unresponsive_engines: list[list[str]] = field(default_factory=list[list[str]])

    def reset(self) -> None:
        super().reset()
        self.json_enabled = True
        self.results, self.answers, self.infoboxes = [], [], []
        self.suggestions, self.unresponsive_engines = [], []

    def answer(self, seen: Seen) -> Page:
        if seen.path != "/search":
            return Page(404, b"not found", "text/plain")
        if not seen.query.get("q"):
            return Page(400, json.dumps({"error": "No query"}).encode(), "application/json")
        if seen.query.get("format") != "json":
            return Page(200, b"<html><body>results</body></html>")
        if not self.json_enabled:
            # SearXNG's answer to a format missing from search.formats.
            return Page(403, b"<!doctype html><title>403 Forbidden</title><h1>Forbidden</h1>")
        body = {
            "query": seen.query["q"],
            "results": self.results,
            "answers": self.answers,
            "corrections": [],
            "infoboxes": self.infoboxes,
            "suggestions": self.suggestions,
            "unresponsive_engines": self.unresponsive_engines,
        }
        return Page(200, json.dumps(body).encode(), "application/json")

    @contextlib.asynccontextmanager
    async def stopped(self) -> AsyncIterator[None]:
        """Nothing listens on the instance's port for the block."""
        await self.stop()
        try:
            yield
        finally:
            await self.start()

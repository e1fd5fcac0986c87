"""GET one http(s) page for a model and hand it back as Markdown, bounded in every direction.

- Every connection goes through the kernel's connect-time address guard
  (popagent_core.address_guard, the one the hooks transport uses): loopback, private,
  link-local, CGNAT, metadata and other non-global targets are refused before a socket
  opens, decimal, octal and IPv6 spellings included (the resolver reads them as the
  addresses they are), and the connection goes to the very address that was checked.
- Redirects are followed by hand, at most `MAX_REDIRECTS` times; each target is checked
  again (scheme, no credentials) and its connection passes the guard like the first.
- One deadline covers the whole fetch, every hop included; the body is read up to
  `max_bytes` and the rest is never read (the page is marked truncated).
- httpcore, not an HTTP client: no cookies, environment proxies, credentials or automatic
  redirects to switch off.
- HTML becomes Markdown with markdownify (MIT, maintained, configurable through
  BeautifulSoup; html2text, the other common choice, is GPL-3.0); script, style and other
  non-content elements are dropped first. Plain text, Markdown and JSON pass as text.
- The conversion is pure Python (html.parser and markdownify: a dense 2 MB page took 10 to
  40 s) and runs in a worker thread, at most `CONVERSIONS` at once, never on the event loop;
  only the first `MAX_HTML_BYTES` of a page are converted (the page is marked truncated), which
  bounds its work (the Markdown a model gets is cut at `MAX_MARKDOWN_CHARS` anyway).
  markdownify recurses once an element level: elements nested deeper than `MAX_HTML_DEPTH`
  become their text (500 nested elements were a RecursionError out of the tool).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

import certifi
import httpcore
from bs4 import BeautifulSoup
from bs4.element import NavigableString, Tag
from markdownify import MarkdownConverter

from popagent_core.address_guard import BlockedAddress, GuardedBackend, Resolver, guarded_pool
from popagent_core.errors import InvalidArgument, Unavailable

MAX_REDIRECTS = 5
MAX_URL_CHARS = 2000
# What reaches the model: a long page is cut after this many characters of Markdown.
MAX_MARKDOWN_CHARS = 40_000
USER_AGENT = b"Mozilla/5.0 (compatible; popagent-webfetch/1)"
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown", "application/json", "text/csv"})
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_DROPPED = ("script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "form", "head")
_BLANK_RUNS = re.compile(r"\n{3,}")
MAX_HTML_BYTES = 512 * 1024
# Deeper elements are kept as their plain text: markdownify's recursion stays far from the limit.
MAX_HTML_DEPTH = 64
# HTML conversions running at once in worker threads (each holds the GIL in turns, never the loop).
CONVERSIONS = 2


class FetchRefused(InvalidArgument):
    """The URL, or a redirect's target, is not one webFetch may request."""


@dataclass(frozen=True)
class FetchedPage:
    url: str
    status: int
    content_type: str
    title: str
    markdown: str
    truncated: bool
    redirects: tuple[str, ...]

    def as_tool_result(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": self.status,
            "contentType": self.content_type,
            "title": self.title,
            "markdown": self.markdown,
            "truncated": self.truncated,
            "redirects": list(self.redirects),
        }


def checked_url(url: str) -> str:
    """`url` if webFetch may request it (http(s), a host, no credentials); FetchRefused otherwise."""
    if len(url) > MAX_URL_CHARS:
        raise FetchRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise FetchRefused(f"malformed URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs are fetched, not {parts.scheme or 'a relative URL'!r}")
    if not parts.hostname:
        raise FetchRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise FetchRefused("URLs with credentials are not fetched")
    # The fragment is the browser's, never sent.
    return urllib.parse.urlunsplit(parts._replace(fragment=""))


def _media_type(value: str) -> tuple[str, str | None]:
    media, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, raw = param.strip().partition("=")
        if name.lower() == "charset" and raw:
            charset = raw.strip("\"' ")
    return media.strip().lower(), charset


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def html_to_markdown(html: bytes, charset: str | None, base_url: str) -> tuple[str, str]:
    """(title, Markdown) of an HTML page; relative links are made absolute against `base_url`.

    The bytes go to BeautifulSoup, which honours the header's charset and otherwise the
    page's own `<meta charset>`.
    """
    soup = BeautifulSoup(html, "html.parser", from_encoding=charset)
    _flatten_below(soup, MAX_HTML_DEPTH)
    title = " ".join(soup.title.get_text().split()) if soup.title else ""
    for element in soup.find_all(_DROPPED):
        element.decompose()
    for link in soup.find_all("a", href=True):
        link["href"] = urllib.parse.urljoin(base_url, str(link["href"]))
    for image in soup.find_all("img", src=True):
        image["src"] = urllib.parse.urljoin(base_url, str(image["src"]))
    markdown = MarkdownConverter(heading_style="ATX", bullets="-").convert_soup(soup.body or soup)
    return title, _BLANK_RUNS.sub("\n\n", markdown).strip()


def _flatten_below(soup: BeautifulSoup, max_depth: int) -> None:
    """Every element `max_depth` levels down becomes its text (walked without recursion)."""
    stack: list[tuple[Tag, int]] = [(soup, 0)]
    while stack:
        element, depth = stack.pop()
        for child in list(element.children):
            if not isinstance(child, Tag):
                continue
            if depth + 1 >= max_depth:
                child.replace_with(NavigableString(child.get_text(" ")))
            else:
                stack.append((child, depth + 1))


class PageFetcher:
    """One keep-alive pool for every webFetch of the process."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout_s: float,
        max_bytes: int,
        resolver: Resolver | None = None,
        backend: GuardedBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._conversions = asyncio.Semaphore(CONVERSIONS)
        self.backend = backend or GuardedBackend(allow_private=allow_private, resolver=resolver)
        self._pool = guarded_pool(
            self.backend,
            ssl_context or ssl.create_default_context(cafile=certifi.where()),
            max_connections=32,
            max_keepalive=8,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def fetch(self, url: str) -> FetchedPage:
        """The page at `url` as Markdown; FetchRefused for a URL or target the guard refuses,
        Unavailable when the page cannot be had."""
        current = checked_url(url)
        redirects: list[str] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    status, headers, body, truncated = await self._get(current)
                    location = headers.get("location")
                    if status in (301, 302, 303, 307, 308) and location:
                        if len(redirects) >= MAX_REDIRECTS:
                            raise Unavailable(f"more than {MAX_REDIRECTS} redirects, last to {location[:200]}")
                        current = checked_url(urllib.parse.urljoin(current, location))
                        redirects.append(current)
                        continue
                    return await self._page(current, status, headers, body, truncated, tuple(redirects))
        except TimeoutError:
            raise Unavailable(f"no complete answer within {self.timeout_s:g} s") from None
        except BlockedAddress as exc:
            raise FetchRefused(f"address refused: {exc}") from None
        except (httpcore.ConnectError, httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}"[:500]) from None
        except httpcore.UnsupportedProtocol as exc:
            raise FetchRefused(str(exc)) from None

    async def _get(self, url: str) -> tuple[int, dict[str, str], bytes, bool]:
        request_headers = [
            (b"User-Agent", USER_AGENT),
            (b"Accept", b"text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,*/*;q=0.5"),
            # A compressed body could expand past the cap before it is counted.
            (b"Accept-Encoding", b"identity"),
        ]
        async with self._pool.stream("GET", url, headers=request_headers) as response:
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in response.headers}
            if 300 <= response.status < 400:
                return response.status, headers, b"", False
            chunks: list[bytes] = []
            size = 0
            truncated = False
            async for chunk in response.aiter_stream():
                chunks.append(chunk)
                size += len(chunk)
                if size >= self.max_bytes:
                    # Leaving the stream context closes the connection mid-body.
                    truncated = size > self.max_bytes
                    break
            return response.status, headers, b"".join(chunks)[: self.max_bytes], truncated

    async def _page(
        self,
        url: str,
        status: int,
        headers: dict[str, str],
        body: bytes,
        truncated: bool,
        redirects: tuple[str, ...],
    ) -> FetchedPage:
        if not 200 <= status < 300:
            raise Unavailable(f"{url} answered HTTP {status}")
        if headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
            raise Unavailable(f"{url} answered a compressed body although none was accepted")
        media, charset = _media_type(headers.get("content-type", "text/html"))
        if media in HTML_TYPES:
            if len(body) > MAX_HTML_BYTES:
                body, truncated = body[:MAX_HTML_BYTES], True
            async with self._conversions:
                try:
                    title, markdown = await asyncio.to_thread(html_to_markdown, body, charset, url)
                except RecursionError:
                    raise Unavailable(f"{url} is nested too deeply to convert to Markdown") from None
        elif media in TEXT_TYPES or media.startswith("text/"):
            title, markdown = "", _decode(body, charset).strip()
        else:
            raise Unavailable(f"{url} is {media or 'of no stated type'}, not a page webFetch can read as text")
        if len(markdown) > MAX_MARKDOWN_CHARS:
            markdown, truncated = markdown[:MAX_MARKDOWN_CHARS], True
        return FetchedPage(url, status, media, title, markdown, truncated, redirects)

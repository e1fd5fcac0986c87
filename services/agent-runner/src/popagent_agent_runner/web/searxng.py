"""A client of SearXNG's JSON API (`GET {SEARXNG_URL}/search?q=…&format=json`).

The instance is the operator's own (deploy/compose.yaml), so there is no credential and no
address guard; what comes back is bounded before any of it reaches a model: a few results
with a short snippet each, plus the instance's answers, first infobox, suggestions and the
engines that did not answer. Every way the instance can fail is an `Unavailable` whose
message names the cause, JSON being disabled (403) and the limiter (429) included, because
both are settings.yml mistakes an operator can fix from the message alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from popagent_core.errors import Unavailable

MAX_RESULTS = 8
MAX_SNIPPET_CHARS = 400
MAX_TITLE_CHARS = 200
MAX_URL_CHARS = 2000
MAX_ANSWERS = 3
MAX_SUGGESTIONS = 5
MAX_INFOBOX_CHARS = 800
USER_AGENT = "popagent-agent-runner/1"


def _text(value: Any, limit: int) -> str:
    text = " ".join(value.split()) if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class SearchQuery:
    query: str
    categories: tuple[str, ...] = ()
    language: str | None = None
    time_range: str | None = None
    page: int = 1

    def params(self) -> dict[str, str]:
        params = {"q": self.query, "format": "json", "pageno": str(self.page)}
        if self.categories:
            params["categories"] = ",".join(self.categories)
        if self.language:
            params["language"] = self.language
        if self.time_range:
            params["time_range"] = self.time_range
        return params


class SearxngClient:
    def __init__(self, base_url: str, *, timeout_s: float, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        # No environment proxies or netrc: the instance is on the internal network.
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=timeout_s,
            trust_env=False,
            follow_redirects=False,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def search(self, query: SearchQuery) -> dict[str, Any]:
        """The bounded answer to `query`; Unavailable naming the cause when SearXNG gives none."""
        where = f"SearXNG at {self.base_url}"
        try:
            response = await self._http.get(f"{self.base_url}/search", params=query.params())
        except httpx.TimeoutException:
            raise Unavailable(f"{where} did not answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise Unavailable(f"{where} is unreachable ({type(exc).__name__}: {exc})"[:500]) from None
        if response.status_code == 403:
            raise Unavailable(
                f"{where} refused format=json (HTTP 403): its JSON API is disabled; "
                "list json under search.formats in its settings.yml"
            )
        if response.status_code == 429:
            raise Unavailable(
                f"{where} rate-limited the request (HTTP 429): its limiter is on; "
                "turn server.limiter off for the internal network or pass this host"
            )
        if response.status_code != 200:
            raise Unavailable(f"{where} answered HTTP {response.status_code}{_error_of(response)}")
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise Unavailable(f"{where} answered something other than JSON") from None
        if not isinstance(body, dict):
            raise Unavailable(f"{where} answered JSON that is not an object")
        return bounded_answer(query, body)


def _error_of(response: httpx.Response) -> str:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return f": {_text(error, 200)}" if isinstance(error, str) else ""


def _items(body: dict[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    return value if isinstance(value, list) else []


def bounded_answer(query: SearchQuery, body: dict[str, Any]) -> dict[str, Any]:
    results = [
        {
            "title": _text(item.get("title"), MAX_TITLE_CHARS),
            "url": item["url"][:MAX_URL_CHARS],
            "snippet": _text(item.get("content"), MAX_SNIPPET_CHARS),
            "engine": _text(item.get("engine"), 60),
            "date": item.get("publishedDate") if isinstance(item.get("publishedDate"), str) else None,
        }
        for item in _items(body, "results")
        if isinstance(item, dict) and isinstance(item.get("url"), str)
    ][:MAX_RESULTS]
    answers = [
        {"answer": _text(item.get("answer"), MAX_SNIPPET_CHARS), "url": item.get("url")}
        for item in _items(body, "answers")
        if isinstance(item, dict) and isinstance(item.get("answer"), str)
    ][:MAX_ANSWERS]
    answer: dict[str, Any] = {
        "query": query.query,
        "page": query.page,
        "results": results,
        "answers": answers,
        "suggestions": [_text(s, MAX_TITLE_CHARS) for s in _items(body, "suggestions") if isinstance(s, str)][
            :MAX_SUGGESTIONS
        ],
        # Pairs [engine, reason]: why a result list may be thin.
        "unresponsiveEngines": [
            f"{_text(pair[0], 60)}: {_text(pair[1], 200)}"
            for pair in _items(body, "unresponsive_engines")
            if isinstance(pair, list) and len(pair) == 2
        ],
    }
    infobox = next((item for item in _items(body, "infoboxes") if isinstance(item, dict)), None)
    if infobox is not None:
        answer["infobox"] = {
            "title": _text(infobox.get("infobox"), MAX_TITLE_CHARS),
            "content": _text(infobox.get("content"), MAX_INFOBOX_CHARS),
            "urls": [
                u["url"][:MAX_URL_CHARS]
                for u in infobox.get("urls") or []
                if isinstance(u, dict) and isinstance(u.get("url"), str)
            ][:5],
        }
    return answer

"""webSearch's SearXNG client against the stand-in over real HTTP: the query it sends, the
bounded answer, and a tool error naming the cause when SearXNG is down or JSON is disabled."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from popagent_agent_runner.settings import Settings
from popagent_agent_runner.web.searxng import MAX_RESULTS, MAX_SNIPPET_CHARS, SearchQuery, SearxngClient
from popagent_core.credentials import generate_credentials
from popagent_core.errors import Unavailable
from popagent_core.settings import describe_validation_error
from popagent_dev.embedded import free_port
from support.web_standins import Page, SearxngStandIn, searxng_result


@pytest.fixture
async def searxng() -> AsyncIterator[SearxngStandIn]:
    async with SearxngStandIn() as standin:
        yield standin


@pytest.fixture
async def client(searxng: SearxngStandIn) -> AsyncIterator[SearxngClient]:
    client = SearxngClient(searxng.base + "/", timeout_s=2.0)
    yield client
    await client.aclose()


async def test_a_search_sends_the_documented_query_and_returns_bounded_results(
    searxng: SearxngStandIn, client: SearxngClient
) -> None:
    searxng.results = [
        searxng_result("PEP 8", "https://peps.python.org/pep-0008/", "Style Guide for Python Code", "google"),
        searxng_result(
            "Release notes",
            "https://docs.python.org/3/whatsnew/3.13.html",
            "x" * 5000,
            "bing",
            publishedDate="2026-10-07T00:00:00",
        ),
        *(searxng_result(f"r{i}", f"https://example.org/{i}", "more") for i in range(20)),
    ]
    searxng.answers = [{"url": "https://python.org", "engine": "wikidata", "answer": "Python 3.14", "template": "x"}]
    searxng.infoboxes = [
        {
            "infobox": "Python",
            "id": "https://en.wikipedia.org/wiki/Python",
            "content": "A programming language.",
            "urls": [{"title": "Official", "url": "https://python.org"}],
            "attributes": [],
            "engine": "wikipedia",
            "engines": ["wikipedia"],
        }
    ]
    searxng.suggestions = ["python style guide"]
    searxng.unresponsive_engines = [["brave", "timeout"], ["qwant", "Suspended: too many requests"]]

    answer = await client.search(SearchQuery("python style", ("it", "general"), "en", "year", 2))

    [seen] = searxng.requests
    assert seen.query == {
        "q": "python style",
        "format": "json",
        "pageno": "2",
        "categories": "it,general",
        "language": "en",
        "time_range": "year",
    }
    assert "authorization" not in seen.headers and "cookie" not in seen.headers
    assert len(answer["results"]) == MAX_RESULTS
    assert answer["results"][0] == {
        "title": "PEP 8",
        "url": "https://peps.python.org/pep-0008/",
        "snippet": "Style Guide for Python Code",
        "engine": "google",
        "date": None,
    }
    second = answer["results"][1]
    assert second["date"] == "2026-10-07T00:00:00" and len(second["snippet"]) == MAX_SNIPPET_CHARS
    assert answer["answers"] == [{"answer": "Python 3.14", "url": "https://python.org"}]
    assert answer["infobox"] == {
        "title": "Python",
        "content": "A programming language.",
        "urls": ["https://python.org"],
    }
    assert answer["suggestions"] == ["python style guide"]
    assert answer["unresponsiveEngines"] == ["brave: timeout", "qwant: Suspended: too many requests"]
    assert (answer["query"], answer["page"]) == ("python style", 2)


async def test_optional_parameters_are_left_out_when_not_given(searxng: SearxngStandIn, client: SearxngClient) -> None:
    answer = await client.search(SearchQuery("nothing"))
    assert searxng.requests[0].query == {"q": "nothing", "format": "json", "pageno": "1"}
    assert answer["results"] == [] and "infobox" not in answer


async def test_json_disabled_is_an_error_naming_search_formats(searxng: SearxngStandIn, client: SearxngClient) -> None:
    searxng.json_enabled = False
    with pytest.raises(Unavailable, match=r"refused format=json \(HTTP 403\).*search\.formats"):
        await client.search(SearchQuery("anything"))


async def test_searxng_down_is_an_error_naming_the_instance() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = SearxngClient(url, timeout_s=2.0)
    try:
        with pytest.raises(Unavailable, match=rf"SearXNG at {url} is unreachable \(ConnectError"):
            await client.search(SearchQuery("anything"))
    finally:
        await client.aclose()


async def test_a_slow_instance_is_cut_at_the_timeout(searxng: SearxngStandIn) -> None:
    class Slow(SearxngStandIn):
        def answer(self, seen):  # type: ignore[no-untyped-def]
            return Page(200, b"{}", "application/json", delay_s=5)

    async with Slow() as slow:
        client = SearxngClient(slow.base, timeout_s=0.3)
        try:
            with pytest.raises(Unavailable, match=r"did not answer within 0\.3 s"):
                await client.search(SearchQuery("slow"))
        finally:
            await client.aclose()


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (Page(429, b"Too Many Requests", "text/plain"), r"HTTP 429\): its limiter is on"),
        (Page(500, b'{"error": "search error"}', "application/json"), r"answered HTTP 500: search error"),
        (Page(200, b"<html>not json</html>"), r"answered something other than JSON"),
    ],
)
async def test_other_failures_name_their_cause(page: Page, message: str) -> None:
    class Broken(SearxngStandIn):
        def answer(self, seen):  # type: ignore[no-untyped-def]
            return page

    async with Broken() as broken:
        client = SearxngClient(broken.base, timeout_s=2.0)
        try:
            with pytest.raises(Unavailable, match=message):
                await client.search(SearchQuery("q"))
        finally:
            await client.aclose()


_, CALLERS = generate_credentials(("gateway",))


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SEARXNG_URL", "searxng:8080"),
        ("POPAGENT_WEB_SEARCH_TIMEOUT_S", "0"),
        ("POPAGENT_WEB_FETCH_MAX_BYTES", "10"),
        ("POPAGENT_WEB_FETCH_ALLOW_PRIVATE_ADDRESSES", "maybe"),
    ],
)
def test_a_bad_web_setting_names_its_variable(variable: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@localhost/db")
    monkeypatch.setenv("POPAGENT_INTERNAL_CALLERS", CALLERS)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()  # pyright: ignore[reportCallIssue] - values come from the environment
    assert describe_validation_error(Settings, caught.value).startswith(f"{variable} ")


def test_the_web_settings_default_to_a_local_searxng_and_no_private_fetches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@localhost/db")
    monkeypatch.setenv("POPAGENT_INTERNAL_CALLERS", CALLERS)
    for variable in ("SEARXNG_URL", "POPAGENT_WEB_FETCH_ALLOW_PRIVATE_ADDRESSES"):
        monkeypatch.delenv(variable, raising=False)
    settings = Settings()  # pyright: ignore[reportCallIssue] - values come from the environment
    assert settings.searxng_url == "http://127.0.0.1:8889"
    assert settings.web_fetch_allow_private_addresses is False

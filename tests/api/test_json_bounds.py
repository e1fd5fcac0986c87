"""Valid JSON that no service can store is refused at the edge with a 422 naming the field
(issue 23, finding 5; NUL characters and a chunked body over the cap, finding 7), over real
HTTP to the API stack."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from support.stacks import Stack

TEXT_LOC = ["body", "message", "parts", 0, "text"]


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def chat_body(session: str, *, text: str = "hi", metadata: Any = None) -> str:
    message: dict[str, Any] = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}
    if metadata is not None:
        message["metadata"] = metadata

    # json.dumps, not httpx's: it writes lone surrogates as escapes, as a hostile client would.
    return json.dumps({"id": session, "message": message})


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/sessions", json={"title": "bounds"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def post_json(client: httpx.AsyncClient, method: str, url: str, raw: str | bytes) -> httpx.Response:
    return await client.request(method, url, content=raw, headers={"content-type": "application/json"})


def refused(response: httpx.Response, loc: list[Any], kind: str) -> None:
    assert response.status_code == 422, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"
    [detail] = response.json()["details"]
    assert (detail["loc"], detail["type"]) == (loc, kind), detail


@pytest.mark.parametrize(
    ("metadata", "loc", "kind"),
    [
        ({"n": 2**64}, ["body", "message", "metadata", "n"], "int_too_large"),
        ({"n": -(2**63) - 1}, ["body", "message", "metadata", "n"], "int_too_large"),
        ({"list": [0, 10**30]}, ["body", "message", "metadata", "list", 1], "int_too_large"),
        (nested(256), None, "json_too_deep"),
        (nested(900), None, "json_too_deep"),
        ({"k\x00": 1}, ["body", "message", "metadata", "k\x00"], "string_nul"),
    ],
)
async def test_chat_metadata_no_service_can_store_is_a_422_naming_the_field(
    client: httpx.AsyncClient, metadata: Any, loc: list[Any] | None, kind: str
) -> None:
    session = await new_session(client)
    response = await post_json(client, "POST", "/api/chat", chat_body(session, metadata=metadata))
    assert response.status_code == 422, response.text
    [detail] = response.json()["details"]
    assert detail["type"] == kind
    if loc is not None:
        assert detail["loc"] == loc
    else:
        assert detail["loc"][:4] == ["body", "message", "metadata", "a"]


async def test_a_lone_surrogate_or_a_nul_in_chat_text_is_a_422(client: httpx.AsyncClient) -> None:
    session = await new_session(client)
    refused(
        await post_json(client, "POST", "/api/chat", chat_body(session, text="\ud800")), TEXT_LOC, "string_surrogate"
    )
    refused(await post_json(client, "POST", "/api/chat", chat_body(session, text="a\x00b")), TEXT_LOC, "string_nul")


async def test_nan_and_infinities_are_a_422(client: httpx.AsyncClient) -> None:
    session = await new_session(client)
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        raw = chat_body(session, metadata={"x": 1}).replace('{"x": 1}', '{"x": ' + literal + "}")
        refused(
            await post_json(client, "POST", "/api/chat", raw), ["body", "message", "metadata", "x"], "float_not_finite"
        )


async def test_a_session_save_with_a_lone_surrogate_deep_nesting_or_nul_is_a_422(client: httpx.AsyncClient) -> None:
    session = await new_session(client)
    url = f"/api/sessions/{session}"

    def save(part: dict[str, Any]) -> str:
        import json

        return json.dumps({"revision": 0, "messages": [{"id": "u1", "role": "user", "parts": [part]}]})

    loc = ["body", "messages", 0, "parts", 0, "text"]
    refused(await post_json(client, "PUT", url, save({"type": "text", "text": "\udfff"})), loc, "string_surrogate")
    refused(await post_json(client, "PUT", url, save({"type": "text", "text": "\x00"})), loc, "string_nul")
    deep = await post_json(client, "PUT", url, save({"type": "data-x", "data": nested(300)}))
    assert deep.status_code == 422 and deep.json()["details"][0]["type"] == "json_too_deep", deep.text
    # Nothing was saved: the session is as created.
    assert (await client.get(url)).json()["revision"] == 0
    # A save inside every bound still works (64-bit integers, 60 levels, non-BMP text).
    fine = await post_json(
        client, "PUT", url, save({"type": "data-x", "data": {"n": 2**63 - 1, "deep": nested(55), "t": "\U0001f600"}})
    )
    assert fine.status_code == 200, fine.text


async def test_nul_in_a_name_answers_422_without_database_exception_names(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/sessions", json={"title": "a\x00b"})
    refused(response, ["body", "title"], "string_nul")
    assert "Error" not in response.text


async def test_a_chunked_body_over_the_cap_is_413(api_stack: Stack, client: httpx.AsyncClient) -> None:
    session = await new_session(client)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"revision": 0, "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "'
        for _ in range(32):
            yield b"x" * 65536  # 2 MB in all, no Content-Length: chunked
        yield b'"}]}]}'

    response = await client.put(
        f"/api/sessions/{session}", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413, response.text

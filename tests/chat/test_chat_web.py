"""webSearch and webFetch in chat turns over real HTTP: the scripted model calls them, the
stream and the stored session show their results, hooks see their arguments (the URL)."""

from __future__ import annotations

from chat.helpers import chat, chat_in_a_new_session, new_session, of_type, text_of, thread_rows
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.web_standins import Page, searxng_result


async def test_the_supervisor_searches_the_web_and_the_session_keeps_the_results(stack: Stack) -> None:
    stack.searxng.results = [
        searxng_result("PEP 8 - Style Guide", "https://peps.python.org/pep-0008/", "Style guide for Python code.")
    ]
    stack.searxng.suggestions = ["pep 8 line length"]
    stack.models.push(
        Turn.call(ToolCall("webSearch", {"query": "pep 8", "categories": ["it"], "time_range": "year"}, id="call-s")),
        Turn.say("PEP 8 is Python's style guide [1].", chunk_size=50),
    )
    session, chunks = await chat_in_a_new_session(stack, "what is pep 8?")

    [seen] = stack.searxng.requests
    assert seen.query == {"q": "pep 8", "format": "json", "pageno": "1", "categories": "it", "time_range": "year"}
    [tool_input] = of_type(chunks, "tool-input-available")
    [output] = of_type(chunks, "tool-output-available")
    assert tool_input["toolName"] == "webSearch"
    assert output["output"]["results"] == [
        {
            "title": "PEP 8 - Style Guide",
            "url": "https://peps.python.org/pep-0008/",
            "snippet": "Style guide for Python code.",
            "engine": "duckduckgo",
            "date": None,
        }
    ]
    assert output["output"]["suggestions"] == ["pep 8 line length"]
    assert text_of(chunks) == "PEP 8 is Python's style guide [1]."
    # The model read the results under its call's id.
    tool_message = stack.models.requests[1]["messages"][-1]
    assert tool_message["tool_call_id"] == "call-s" and "peps.python.org/pep-0008" in tool_message["content"]
    rows = await thread_rows(stack, session)
    [stored] = [p for p in rows[1][2]["ui"]["parts"] if p["type"] == "tool-webSearch"]
    assert stored["state"] == "output-available" and stored["output"] == output["output"]


async def test_searxng_with_json_disabled_is_a_tool_error_the_model_and_the_user_read(stack: Stack) -> None:
    stack.searxng.json_enabled = False
    stack.models.push(Turn.call(ToolCall("webSearch", {"query": "news"}, id="call-s")), Turn.say("Search is off."))
    _, chunks = await chat_in_a_new_session(stack, "any news?")
    [error] = of_type(chunks, "tool-output-error")
    assert "refused format=json (HTTP 403)" in error["errorText"] and "search.formats" in error["errorText"]
    assert "search.formats" in stack.models.requests[1]["messages"][-1]["content"]
    [failure] = stack.hook_requests("PostToolUseFailure")
    assert "HTTP 403" in failure["detail"]["error"]
    assert text_of(chunks) == "Search is off."


async def test_searxng_down_is_a_tool_error_naming_the_instance(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("webSearch", {"query": "news"}, id="call-s")), Turn.say("Search is down."))
    async with stack.searxng.stopped(), stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "any news?")
    [error] = of_type(chunks, "tool-output-error")
    assert f"SearXNG at {stack.searxng.base} is unreachable" in error["errorText"]


async def test_the_researcher_fetches_a_page_and_pre_tool_use_sees_the_url(stack: Stack) -> None:
    stack.pages.pages["/guide"] = Page(body=b"<html><title>Guide</title><body><h1>Install</h1><p>Run it.</p></body>")
    url = stack.pages.url("/guide")
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": f"Read {url}"}, id="call-d")),
        Turn.call(ToolCall("webFetch", {"url": url}, id="call-f")),
        Turn.say("The guide says: run it."),
        Turn.say("Run it, says the guide.", chunk_size=100),
    )
    _, chunks = await chat_in_a_new_session(stack, "what does the guide say?")

    assert text_of(chunks) == "Run it, says the guide."
    fetches = [r for r in stack.hook_requests("PreToolUse") if r["detail"]["toolName"] == "webFetch"]
    assert [(r["toolCallId"], r["detail"]) for r in fetches] == [
        ("call-f", {"toolName": "webFetch", "arguments": {"url": url}, "agent": "researcher"})
    ]
    assert [seen.path for seen in stack.pages.requests] == ["/guide"]
    # The researcher read the page as Markdown.
    tool_message = stack.models.requests[2]["messages"][-1]
    assert tool_message["tool_call_id"] == "call-f" and "# Install\\n\\nRun it." in tool_message["content"]
    [post] = [r for r in stack.hook_requests("PostToolUse") if r["detail"]["toolName"] == "webFetch"]
    assert post["detail"]["result"]["title"] == "Guide" and post["detail"]["result"]["url"] == url
    activity = of_type(chunks, "data-agentActivity")[-1]["data"]
    assert [(i["step"], i["toolCalls"]) for i in activity["iterations"]] == [(1, ["webFetch"]), (2, [])]


async def test_a_denied_fetch_makes_no_connection(stack: Stack) -> None:
    # The delegation passes the gate; the fetch inside it does not.
    stack.receiver.script(
        "/pre-tool",
        lambda request: (
            answer("deny", reason="no browsing today")
            if request.json()["detail"]["toolName"] == "webFetch"
            else answer("pass")
        ),
    )
    stack.pages.pages["/guide"] = Page(body=b"<p>secret</p>")
    url = stack.pages.url("/guide")
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "read it"}, id="call-d")),
        Turn.call(ToolCall("webFetch", {"url": url}, id="call-f")),
        Turn.say("I could not read it."),
        Turn.say("Not read.", chunk_size=100),
    )
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "read the guide")
    assert stack.pages.connections == 0
    assert "no browsing today" in stack.models.requests[2]["messages"][-1]["content"]

"""The web UI in a real browser against the whole stack.

The test starts a private NATS, a fresh database, the scripted model server, an HTTPS hook
receiver that denies the clock tool, and the seven services as real processes (the
launcher's `Stack`); the gateway serves the built UI (ui/dist) at `/`. Then
tests/ui/browser.mjs drives Debian's headless Chromium through playwright-core: the API
key prompt (kept per browser), the first run (the seeded default is not in the catalog: the
first message goes out on the picked model, then one click saves it as the default), the
model picker without the catalog's embedding model, an empty "New chat" that stores nothing,
streamed text, a Markdown answer (table, highlighted code, raw HTML not rendered), a failed
turn kept in the session then Retry with one stored question, edit and resend, workspace tools,
a delegation, Stop, the hook timeline of a denied tool call and the empty timeline's help, web
search and fetch views, another tab's change shown after the next turn (the UI writes no turn
back), a reload that keeps the delegation activity, double texting (a message queued while an
answer streams, shown queued then answered in order; queued turns listed after a reload and
cancelled; interrupt and rollback), a second tab that follows the running answer and queues a
message answered after it in both tabs (no 409, no conflict), a chat that
reopens on its model, sessions grouped by date and searched by title
with actions in a menu, rename/archive (the archived chat's notice and Restore)/delete, a docs
search passage rendered as Markdown without a raw score, settings (errors in words, Save only when
changed, the unsaved-edit warning), a paused schedule, a long task result shown collapsed,
long-term memories, the theme picker (dark kept through a reload, set before the app's script
runs), the keyboard shortcuts sheet and its shortcuts, the 375 px
layout (the picker shows the model, no page scrolls sideways), message versions (an edit of the
first message, switching back and forth, kept through a reload), the browser panel beside the chat
at 1440 px with takeover input reaching the page (the real MCP browser server, `@playwright/mcp`
with Chromium, behind the BifrOSt socket) and a gone tab's own message, the phone size (390 x 844:
the Pages menu, settings tabs in one row, the traces table scrolling in its frame), and axe-core on
the chat, settings, tasks and observability pages in the Light and the Dark theme. Screenshots of each step go to
tests/output/ui/.

Needs: `npm ci --prefix ui && npm --prefix ui run build` (make test does both) and
`/usr/bin/chromium` (Debian's chromium package).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_tools.harness import serving_oauth_peer
from ui.helpers import OUTPUT, drive, launched_stack, message_text, prerequisites, stack_environment

from popagent_dev import embedded
from popagent_dev.launcher import Stack
from support.browser_peer import browser_peer
from support.https_receiver import HttpsReceiver, answer, make_secret
from support.model_gateway import ModelGateway, ModelInfo, ToolCall, Turn
from support.web_standins import Page, PageServer, SearxngStandIn, searxng_result

pytestmark = [pytest.mark.timeout(480), pytest.mark.xdist_group("stack-ui")]

DRIVER = Path(__file__).with_name("browser.mjs")

API_KEY = "browser-test-key-" + "k" * 16
DENY_PATH = "/pre-tool-use"
DENY_REASON = "blocked by the UI test policy"
# A fresh model gateway: the seeded default (`cx/gpt-5.3-codex`) is not listed, so the UI's
# first use asks for a model (the specialists inherit it); a second chat model to switch to.
CATALOG = (
    ModelInfo("fake/fake-chat", context_length=128_000),
    ModelInfo("cx/gpt-5.3-codex-spark", context_length=128_000),
    # Not a chat model: the picker leaves it out.
    ModelInfo("fake/text-embedding-3-small", context_length=8_192),
)
# Double texting: a first answer long enough to send a second message while it streams.
FIRST_ANSWER = "First answer: " + " ".join(f"part{n}" for n in range(90))
SECOND_ANSWER = "Second answer from the queue."
NEWER_ANSWER = "Answer to the newer message."
# Two tabs on one chat: an answer long enough for a second tab to open the chat and send while it streams.
TWO_TABS_ANSWER = "Answer followed by two tabs: " + " ".join(f"piece{n}" for n in range(220))
TWO_TABS_QUEUED_ANSWER = "Answer to the message the second tab queued."
HELLO = "Hello from the scripted model! This answer streams in small pieces so the browser sees it grow."
SLOW = "Slow answer: " + " ".join(f"word{n}" for n in range(800))
DELEGATION_TOOL = re.compile(r"research", re.IGNORECASE)
ANY_DELEGATION_TOOL = re.compile(r"delegat|handoff|transfer|specialist|subagent", re.IGNORECASE)
AGENT_ARGUMENT = re.compile(r"^(agent|agent_?id|specialist|target|to|name)$", re.IGNORECASE)
SEARCH_RESULTS = [
    searxng_result(
        "PEP 8 - Style Guide for Python Code",
        "https://peps.python.org/pep-0008/",
        "This document gives coding conventions for the Python code.",
        publishedDate="2001-07-05T00:00:00",
    ),
    # A result that must not become a link.
    searxng_result("Sneaky", "javascript:alert(1)", "not a web address"),
]
GUIDE_PATH = "/guide.html"
GUIDE = b"""<html><head><title>Install guide</title></head><body><h1>Install</h1>
<p>Run <code>make setup</code> first.</p><script>document.title = "x"</script></body></html>"""
MARKDOWN = """## Results

| tool | calls |
| --- | ---: |
| webSearch | 3 |
| webFetch | 1 |

```python
def add(a, b):
    return a + b
```

<script>window.__injected = true</script>

Inline <b>raw html</b> is dropped, and **bold** renders.
"""
# The browser panel's page: a field at a known place of the viewport, and a form that reports what was typed.
FORM_PATH = "/form.html"
FORM_SENT_PATH = "/form-sent"
FORM = b"""<html><head><title>Name form</title></head><body style="margin:0">
<form action="/form-sent" method="get"><input name="name" aria-label="Name"
style="position:absolute;left:20px;top:20px;width:300px;height:40px;font-size:20px"></form></body></html>"""
form_url: list[str] = []
# A task's result long enough to be shown collapsed on the tasks page (its first lines).
LONG_RESULT = "\n".join(f"- Line {n} of the long result." for n in range(1, 31))
# The "fail once" prompt: the model refuses the first request, then answers (the UI's Retry).
fail_once = {"armed": True}
# The page server's guide URL, once it listens (the scripted model fetches it).
guide_url: list[str] = []
# The OAuth-protected MCP server (tests/mcp_tools/oauth_peer.py) the MCP page connects in its own window.
oauth_mcp_url: list[str] = []


def _tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tools = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") or {}
        if "name" in function:
            tools[function["name"]] = function.get("parameters") or {}
    return tools


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a delegation tool from its JSON schema: the researcher and a task."""
    arguments: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        if AGENT_ARGUMENT.match(name):
            arguments[name] = "researcher"
        elif kind == "string" or kind is None:
            arguments[name] = "Find the answer to the browser test's question."
        elif kind == "integer" or kind == "number":
            arguments[name] = 1
        elif kind == "boolean":
            arguments[name] = False
    return arguments


# The workspace scenario, one tool per step: read, edit, run, list, then the answer.
REPOSITORY_STEPS = (
    ToolCall("mastra_workspace_read_file", {"path": "calc.py"}),
    ToolCall("mastra_workspace_edit_file", {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
    ToolCall("mastra_workspace_execute_command", {"command": "python -c 'import calc; print(calc.add(2, 3))'"}),
    ToolCall("mastra_workspace_list_files", {"path": "."}),
)


def _repository_turn(messages: list[dict[str, Any]], **pieces: Any) -> Turn:
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    done = sum(1 for m in messages[last_user:] if m.get("role") == "tool")
    if done < len(REPOSITORY_STEPS):
        return Turn.call(REPOSITORY_STEPS[done])
    return Turn.say("Fixed add() in calc.py; it now prints 5.", **pieces)


def respond(body: dict[str, Any]) -> Turn:
    """The scripted model. The newest user prompt picks the scenario; a request that offers no
    delegation tool is a specialist's."""
    messages = body.get("messages") or []
    prompt = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    after_tool = bool(messages) and messages[-1].get("role") == "tool"
    tools = _tools(body)
    delegation = [name for name in tools if DELEGATION_TOOL.search(name)] or [
        name for name in tools if ANY_DELEGATION_TOOL.search(name)
    ]
    pieces = {"chunk_size": 3, "chunk_delay_s": 0.02}
    if not delegation:
        return Turn.say("Researcher notes: the answer is 42.", **pieces)
    if '<attachment name="rainfall.csv" type="text/csv">' in prompt:
        # The attached file's text reached the model, delimited with its name: answer from it.
        wettest = max(
            (line.split(",") for line in prompt.split("\n") if line.count(",") == 1 and line.split(",")[1].isdigit()),
            key=lambda row: int(row[1]),
        )
        return Turn.say(f"From rainfall.csv: {wettest[0]} is the wettest, with {wettest[1]} days of rain.", **pieces)
    if prompt.startswith("Two tabs queued"):
        return Turn.say(TWO_TABS_QUEUED_ANSWER, **pieces)
    if prompt.startswith("Two tabs"):
        return Turn.say(TWO_TABS_ANSWER, chunk_size=4, chunk_delay_s=0.04)
    if prompt.startswith("Double text first"):
        return Turn.say(FIRST_ANSWER, chunk_size=4, chunk_delay_s=0.04)
    if prompt.startswith("Double text newer"):
        return Turn.say(NEWER_ANSWER, **pieces)
    if prompt.startswith("Double text"):
        return Turn.say(SECOND_ANSWER, **pieces)
    if "open the form page" in prompt.lower():
        if after_tool:
            return Turn.say("The form page is open in the browser.", **pieces)
        return Turn.call(
            ToolCall("bifrostNavigator", {"operation": "browser_navigate", "arguments": {"url": form_url[0]}})
        )
    if "delegate" in prompt.lower():
        if after_tool:
            return Turn.say("The researcher says the answer is 42.", **pieces)
        name = delegation[0]
        return Turn.call(ToolCall(name, _arguments(tools[name])))
    if "remember that" in prompt.lower():
        if after_tool:
            return Turn.say("Noted: you like green tea.", **pieces)
        return Turn.call(ToolCall("remember", {"content": "The user likes green tea."}))
    if "long result" in prompt.lower():
        return Turn.say(LONG_RESULT, chunk_size=40, chunk_delay_s=0.01)
    if "markdown" in prompt.lower():
        return Turn.say(MARKDOWN, **pieces)
    if "fail once" in prompt.lower():
        if fail_once["armed"]:
            fail_once["armed"] = False
            return Turn.fail(400, "scripted refusal for the retry test")
        return Turn.say("Second try worked.", **pieces)
    if "edited question" in prompt.lower():
        return Turn.say("Answer to the edited question.", **pieces)
    if "repository" in prompt.lower():
        return _repository_turn(messages, **pieces)
    if "slow" in prompt.lower():
        return Turn.say(SLOW, chunk_size=4, chunk_delay_s=0.05)
    if "search the web" in prompt.lower():
        if after_tool:
            return Turn.say("PEP 8 is the style guide for Python code.", **pieces)
        return Turn.call(ToolCall("webSearch", {"query": "PEP 8"}))
    if "fetch the guide" in prompt.lower():
        if after_tool:
            return Turn.say("The guide says to run make setup first.", **pieces)
        if "webFetch" not in tools:
            return Turn.say(f"NO webFetch TOOL WAS OFFERED (tools: {sorted(tools)})")
        return Turn.call(ToolCall("webFetch", {"url": guide_url[0]}))
    if "clock" in prompt.lower():
        if after_tool:
            return Turn.say("The clock tool was blocked by policy, so I cannot tell the time.", **pieces)
        if "getTime" not in tools:
            return Turn.say(f"NO getTime TOOL WAS OFFERED (tools: {sorted(tools)})")
        return Turn.call(ToolCall("getTime", {}))
    return Turn.say(HELLO, **pieces)


def _hooks_document(receiver: HttpsReceiver) -> str:
    return json.dumps(
        {
            "version": 1,
            "hooks": {
                "PreToolUse": [
                    {
                        "id": "ui-test-clock-policy",
                        "type": "http",
                        "url": receiver.url(DENY_PATH),
                        "matcher": ["getTime"],
                        "secret": make_secret(),
                        "timeoutMs": 5000,
                    }
                ]
            },
        }
    )


@pytest.fixture
async def stack(
    tmp_path: Path, make_database: Any, nats_server: embedded.NatsProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, ModelGateway, HttpsReceiver, PageServer]]:
    missing = prerequisites()
    assert not missing, "the browser test needs: " + "; ".join(missing)
    dsn = await make_database()
    (tmp_path / "receiver").mkdir()
    (tmp_path / "workspace" / "popagent").mkdir(parents=True)
    (tmp_path / "workspace" / "popagent" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    async with (
        HttpsReceiver(tmp_path / "receiver") as receiver,
        ModelGateway(respond, models=CATALOG) as models,
        SearxngStandIn() as searxng,
        PageServer() as pages,
        # A short path: a Unix socket's path is limited to about 100 bytes.
        browser_peer(Path(tempfile.mkdtemp(prefix="pa-ui-browser-"))) as peer,
        serving_oauth_peer() as oauth_peer,
    ):
        oauth_mcp_url[:] = [oauth_peer.url]
        receiver.script(DENY_PATH, answer("deny", reason=DENY_REASON))
        searxng.results = SEARCH_RESULTS
        pages.pages[GUIDE_PATH] = Page(body=GUIDE)
        guide_url[:] = [pages.url(GUIDE_PATH)]
        pages.pages[FORM_PATH] = Page(body=FORM)
        pages.pages[FORM_SENT_PATH] = Page(body=b"<html><body><p>Sent.</p></body></html>")
        form_url[:] = [pages.url(FORM_PATH)]
        environment = {
            **stack_environment(tmp_path, dsn=dsn, nats_url=nats_server.url, models_url=models.url, api_key=API_KEY),
            "SEARXNG_URL": searxng.base,
            # The guide page is on 127.0.0.1.
            "POPAGENT_WEB_FETCH_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOKS": _hooks_document(receiver),
            "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
            "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
            # The real MCP browser server (@playwright/mcp and Chromium) behind the BifrOSt socket.
            "POPAGENT_BROWSER_SOCKET": str(peer.socket_path),
            # Documentation search (the docs page's step) embeds with the catalog's embedding model.
            "POPAGENT_DOCS_EMBEDDING_MODEL": "fake/text-embedding-3-small",
        }
        async with launched_stack(tmp_path, monkeypatch, environment) as running:
            # The walk-through runs the tests with the shell unasked (the seeded policy asks first:
            # tests/ui/test_approvals_ui.py walks the approval card).
            async with httpx.AsyncClient(base_url=running.url, headers={"x-popagent-key": API_KEY}) as client:
                emptied = await client.patch("/api/agents/popagent", json={"toolApproval": []})
                assert emptied.status_code == 200, emptied.text
            yield running, models, receiver, pages


async def test_the_web_ui_in_a_real_browser(
    stack: tuple[Stack, ModelGateway, HttpsReceiver, PageServer], tmp_path: Path
) -> None:
    running, models, receiver, pages = stack
    # POPAGENT_TEST_UI_STEPS="api key prompt,first-use model pick,...": run only these steps (and check
    # only their names), for working on one step; unset: every step.
    only = [name.strip() for name in os.environ.get("POPAGENT_TEST_UI_STEPS", "").split(",") if name.strip()]
    names = await drive(
        DRIVER,
        tmp_path / "browser.json",
        {
            "url": running.url,
            "apiKey": API_KEY,
            "outDir": str(OUTPUT),
            "denyReason": DENY_REASON,
            "oauthMcpUrl": oauth_mcp_url[0],
            **({"only": only} if only else {}),
        },
        timeout_s=360,
        where=f"; service logs in {running.config.data_dir / 'logs'}",
    )
    for expected in (
        "first-use model pick",
        "model picker",
        "empty new chat not persisted",
        "chat exported",
        "file attached",
        "file attached to a new chat",
        "markdown answer",
        "feedback and trace link",
        "failure then retry",
        "refused turn kept",
        "edit and resend",
        "message versions",
        "generic tool view",
        "api key changed per browser",
        "phone size: navigation, settings tabs, traces table",
        "pages accessible in light and dark",
        "chat remembers its model",
        "sessions grouped and searchable",
        "a search finds a word inside a message",
        "narrow picker shows the model",
        "unsaved changes warning",
        "task page readable",
        "docs search readable",
        "long task result collapsed",
        "theme toggle",
        "shortcuts sheet",
        "streamed text",
        "delegation",
        "stop",
        "hook timeline with a deny",
        "web search results",
        "fetched page",
        "a change from another tab shown after a turn",
        "reload keeps activity",
        "reload mid-answer resumes",
        "rename and archive",
        "setting validation error",
        "schedule with a cron error and the server's next runs",
        "long-term memories",
        "skills editor",
        "mcp servers page",
        "mcp oauth connect",
        "channels page",
        "autonomy page",
        "self-update section",
        "browser profile panel",
        "browser panel beside the chat with takeover input",
        "double texting: enqueue",
        "double texting: queued through a reload and cancelled",
        "double texting: interrupt",
        "double texting: rollback",
        "a second tab follows the turn and queues a message",
    ):
        assert expected in names or (only and expected not in only)
    if "browser panel beside the chat with takeover input" in names:
        # What the user typed on the held page reached the page: its form was sent with it.
        sent = [seen.query for seen in pages.requests if seen.path == FORM_SENT_PATH]
        assert {"name": "hello"} in sent, sent
    if only:
        assert not set(only) - set(names), f"steps not run: {sorted(set(only) - set(names))}"
        return
    # Stop reached the model: the scripted server saw the client abandon the slow stream.
    assert models.disconnected >= 1
    # The deny came from the real hook receiver, for the clock tool.
    denied = receiver.requests_for(DENY_PATH)
    assert denied, "the PreToolUse hook was never called"
    assert all(request.json().get("detail", {}).get("toolName", "getTime") == "getTime" for request in denied)
    for shot in ("chat-1440.png", "chat-375.png", "settings-1440.png", "settings-375.png"):
        assert (OUTPUT / shot).stat().st_size > 10_000, f"{shot} is missing or empty"

"""Human tool approvals in a real browser, against the whole stack run as real processes.

The supervisor's approval policy (PATCH /api/agents/popagent) asks before
`mastra_workspace_write_file`; the scripted model calls it. tests/ui/approvals.mjs drives Debian's
headless Chromium through playwright-core:

- the chat shows an approval card (a labelled region) naming the tool, with the file's path and
  content, why it asks (the policy rule), and Approve / Allow for this session / Deny buttons;
- the session in the sidebar carries a "needs approval" badge while the call waits;
- Approve: the same turn goes on by itself, the call runs, the answer streams in, the badge goes;
- Deny with a reason: the call shows "Denied" and the reason (after a reload too), the answer
  streams in;
- Allow for this session: the call runs, the chat's "Allowed tools" lists the grant, Revoke removes it;
- "Notify me" shows while notification permission is undecided; its click asks for it (the browser
  context grants it) and the button goes; then a request while the page is visible makes no
  notification, and one while the page is hidden makes exactly one, naming the tool (headless
  Chromium is never hidden: the driver overrides document.visibilityState and records what the
  real Notification constructor was given);
- axe-core's WCAG 2 A/AA rules find nothing on the card, the badge, the grants and the rules editor;
- Settings → Agents shows the policy's rule in the approval rules editor.

Afterwards: the approved file is in the workspace, the denied one is not, and the model read the
denial's reason. Screenshots go to tests/output/ui/approvals-*.png. Needs what
tests/ui/test_browser.py needs (the built UI, playwright-core, /usr/bin/chromium).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ui.helpers import CHROMIUM, OUTPUT, drive, launched_stack, message_text, prerequisites, stack_environment

from popagent_dev import embedded
from popagent_dev.launcher import Stack
from support.model_gateway import ModelGateway, ModelInfo, ToolCall, Turn

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-ui")]

DRIVER = Path(__file__).with_name("approvals.mjs")
API_KEY = "approvals-browser-key-" + "k" * 16
MODEL = "fake/fake-chat"
# The specialists inherit the chat's model: the one listed model is all a chat needs.
CATALOG = (ModelInfo(MODEL, context_length=128_000),)
WRITE = "mastra_workspace_write_file"
POLICY = [{"tool": WRITE, "decision": "ask"}]

APPROVE_PROMPT = "Please write the approved notes file."
APPROVE_PATH = "approved-notes.txt"
APPROVE_CONTENT = "written after a person approved\n"
APPROVE_ANSWER = "Wrote approved-notes.txt for you."
DENY_PROMPT = "Please write the denied notes file."
DENY_PATH = "denied-notes.txt"
DENY_CONTENT = "this must never be written\n"
DENY_REASON = "not in this repository, thanks"
DENY_ANSWER = "Understood: I did not write denied-notes.txt."
GRANT_PROMPT = "Please write the granted notes file."
GRANT_PATH = "granted-notes.txt"
GRANT_CONTENT = "allowed for the session\n"
GRANT_ANSWER = "Wrote granted-notes.txt; writes in this chat no longer ask."
NOTIFY_PROMPT = "Please write the notified notes file."
NOTIFY_PATH = "notified-notes.txt"
NOTIFY_CONTENT = "asked while the tab was hidden\n"
NOTIFY_ANSWER = "Wrote notified-notes.txt once you came back."


def respond(body: dict[str, Any]) -> Turn:
    """The scripted model: a write when the user asked for one, then an answer once the tool spoke."""
    messages = body.get("messages") or []
    prompt = next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    after_tool = bool(messages) and messages[-1].get("role") == "tool"
    pieces = {"chunk_size": 4, "chunk_delay_s": 0.01}
    if prompt.startswith(APPROVE_PROMPT):
        if after_tool:
            return Turn.say(APPROVE_ANSWER, **pieces)
        return Turn.call(ToolCall(WRITE, {"path": APPROVE_PATH, "content": APPROVE_CONTENT}))
    if prompt.startswith(DENY_PROMPT):
        if after_tool:
            return Turn.say(DENY_ANSWER, **pieces)
        return Turn.call(ToolCall(WRITE, {"path": DENY_PATH, "content": DENY_CONTENT}))
    if prompt.startswith(GRANT_PROMPT):
        if after_tool:
            return Turn.say(GRANT_ANSWER, **pieces)
        return Turn.call(ToolCall(WRITE, {"path": GRANT_PATH, "content": GRANT_CONTENT}))
    if prompt.startswith(NOTIFY_PROMPT):
        if after_tool:
            return Turn.say(NOTIFY_ANSWER, **pieces)
        return Turn.call(ToolCall(WRITE, {"path": NOTIFY_PATH, "content": NOTIFY_CONTENT}))
    return Turn.say("Nothing to do.", **pieces)


@pytest.fixture
async def stack(
    tmp_path: Path, make_database: Any, nats_server: embedded.NatsProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, ModelGateway, Path]]:
    missing = prerequisites()
    assert not missing, "the browser test needs: " + "; ".join(missing)
    dsn = await make_database()
    repository = tmp_path / "workspace" / "popagent"
    repository.mkdir(parents=True)
    async with ModelGateway(respond, models=CATALOG) as models:
        environment = stack_environment(
            tmp_path, dsn=dsn, nats_url=nats_server.url, models_url=models.url, api_key=API_KEY
        )
        async with launched_stack(tmp_path, monkeypatch, environment) as running:
            yield running, models, repository


def _tool_messages(models: ModelGateway) -> list[str]:
    return [message_text(m) for body in models.requests for m in body.get("messages") or [] if m.get("role") == "tool"]


async def test_tool_approvals_in_a_real_browser(stack: tuple[Stack, ModelGateway, Path], tmp_path: Path) -> None:
    running, models, repository = stack
    async with httpx.AsyncClient(base_url=running.url, headers={"x-popagent-key": API_KEY}, timeout=60) as client:
        runtime = await client.patch("/api/settings/agent-runtime", json={"defaultModel": MODEL})
        assert runtime.status_code == 200, runtime.text
        changed = await client.patch("/api/agents/popagent", json={"toolApproval": POLICY})
        assert changed.status_code == 200, changed.text
        assert [rule["decision"] for rule in changed.json()["toolApproval"]] == ["ask"]

        steps = await drive(
            DRIVER,
            tmp_path / "approvals.json",
            {
                "url": running.url,
                "apiKey": API_KEY,
                "outDir": str(OUTPUT),
                "chromium": str(CHROMIUM),
                "policyReason": f"the ask rule for tool {WRITE}",
                "approvePrompt": APPROVE_PROMPT,
                "approvePath": APPROVE_PATH,
                "approveContent": APPROVE_CONTENT,
                "approveAnswer": APPROVE_ANSWER,
                "denyPrompt": DENY_PROMPT,
                "denyPath": DENY_PATH,
                "denyContent": DENY_CONTENT,
                "denyReason": DENY_REASON,
                "denyAnswer": DENY_ANSWER,
                "grantPrompt": GRANT_PROMPT,
                "grantPath": GRANT_PATH,
                "grantContent": GRANT_CONTENT,
                "grantAnswer": GRANT_ANSWER,
                "notifyPrompt": NOTIFY_PROMPT,
                "notifyPath": NOTIFY_PATH,
                "notifyContent": NOTIFY_CONTENT,
                "notifyAnswer": NOTIFY_ANSWER,
            },
            timeout_s=240,
            where=f"; service logs in {running.config.data_dir / 'logs'}",
        )
        assert steps == [
            "approval card",
            "notify me asks for permission",
            "sidebar badge",
            "approve",
            "deny with a reason",
            "allow for this session, then revoke",
            "notification while hidden",
            "policy editor shows the rule",
        ]

        # The browser's answers are what the server recorded.
        answered = (await client.get("/api/approvals")).json()["approvals"]
        by_path = {approval["arguments"].get("path"): approval for approval in answered}
        assert by_path[APPROVE_PATH]["state"] == "approved", json.dumps(by_path[APPROVE_PATH])
        assert by_path[APPROVE_PATH]["scope"] == "once"
        assert by_path[DENY_PATH]["state"] == "denied", json.dumps(by_path[DENY_PATH])
        assert by_path[DENY_PATH]["answerReason"] == DENY_REASON
        assert (by_path[GRANT_PATH]["state"], by_path[GRANT_PATH]["scope"]) == ("approved", "session")
        assert by_path[NOTIFY_PATH]["state"] == "approved", json.dumps(by_path[NOTIFY_PATH])
        revoked = await client.get(f"/api/sessions/{by_path[GRANT_PATH]['sessionId']}/approval-grants")
        assert revoked.json()["grants"] == [], "the browser's Revoke did not remove the grant"
        assert not (await client.get("/api/approvals", params={"state": "pending"})).json()["approvals"]

    assert (repository / APPROVE_PATH).read_text() == APPROVE_CONTENT
    assert not (repository / DENY_PATH).exists(), "a denied write ran"
    assert (repository / GRANT_PATH).read_text() == GRANT_CONTENT
    assert (repository / NOTIFY_PATH).read_text() == NOTIFY_CONTENT
    assert any(DENY_REASON in text for text in _tool_messages(models)), "the model was not told the denial's reason"
    for shot in ("card", "approved", "denied", "grants", "policy"):
        assert (OUTPUT / f"approvals-{shot}.png").stat().st_size > 10_000, f"{shot} is missing or empty"

"""Runs the real AI SDK client (tests/ai_sdk/*.mjs, Node) against a gateway's /api/chat."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).resolve().parents[1] / "ai_sdk" / "chat-client.mjs"
RESUME_CLIENT = CLIENT.with_name("resume-client.mjs")
APPROVAL_CLIENT = CLIENT.with_name("approval-client.mjs")


async def _run_node(*args: str, within: float = 30) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        "node",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=within)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout)


async def run_ai_sdk_chat(
    url: str, api_key: str, session_id: str, text: str, *, package: str = "ai", workspace_id: str = "popagent"
) -> dict[str, Any]:
    """Send `text` as the newest message through a Chat of `package` (`ai5`, `ai` (6) or `ai7`; ai 5 and 7
    name their major in `x-popagent-ai-sdk`) on `workspace_id` (empty: none sent, the session's own);
    returns {status, errors, messages, requests} once the message's stream ended."""
    return await _run_node(str(CLIENT), url, api_key, session_id, text, package, workspace_id)


async def run_ai_sdk_resume(package: str, url: str, api_key: str, session_id: str) -> dict[str, Any]:
    """A fresh Chat of `package` (`ai5`, `ai` (6) or `ai7`, naming its major as `run_ai_sdk_chat`'s does)
    calls `resumeStream()` on the session, as `useChat({ resume: true })` does on mount; returns
    {status, errors, messages, requests} once the resumed stream ended (`requests`: each request the
    transport made, with its response's status)."""
    return await _run_node(str(RESUME_CLIENT), package, url, api_key, session_id, within=60)


async def run_ai_sdk_approval(
    package: str, url: str, api_key: str, session_id: str, text: str, decision: str, reason: str = ""
) -> dict[str, Any]:
    """Send `text` through a Chat of `package` (`ai` (6) or `ai7`) and answer the tool approval its turn
    asks for with `addToolApprovalResponse` (`decision`: approve or deny), as useChat's approval UI does;
    returns {status, errors, messages, requests, answered} once the chat is ready again."""
    return await _run_node(str(APPROVAL_CLIENT), package, url, api_key, session_id, text, decision, reason, within=60)

"""Runs the real AI SDK client (tests/ai_sdk/chat-client.mjs, Node) against a gateway's /api/chat."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).resolve().parents[1] / "ai_sdk" / "chat-client.mjs"


async def run_ai_sdk_chat(url: str, api_key: str, session_id: str, text: str) -> dict[str, Any]:
    """Send `text` as the newest message through `ai`'s Chat; returns {status, errors, messages}."""
    process = await asyncio.create_subprocess_exec(
        "node",
        str(CLIENT),
        url,
        api_key,
        session_id,
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout)

"""/api/health says when agent-runner's workspace shell cannot build its sandbox, and why."""

from __future__ import annotations

import httpx

from .harness import API_KEY, SANDBOX_UNAVAILABLE, Harness


async def test_health_reports_an_unavailable_sandbox_with_its_reason(harness: Harness) -> None:
    async with httpx.AsyncClient(base_url=harness.url, headers={"x-popagent-key": API_KEY}, timeout=10) as client:
        answer = await client.get("/api/health")
    assert answer.status_code == 503
    body = answer.json()
    assert body["ok"] is False
    assert body["components"]["sandbox"] == {"ok": False, "detail": SANDBOX_UNAVAILABLE}

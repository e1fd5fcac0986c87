"""The OpenAPI document the UI is typed from: the export script prints what the live app serves."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx

from support.stacks import Stack


async def test_the_export_script_prints_the_live_document(api_stack: Stack) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "popagent_gateway.openapi", stdout=asyncio.subprocess.PIPE
    )
    exported, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0
    async with httpx.AsyncClient(base_url=api_stack.url) as client:
        live = (await client.get("/openapi.json")).json()
    document = json.loads(exported)
    assert document == live
    schemas = document["components"]["schemas"]
    # Wire DTOs are camelCase, request bodies closed, and the key is a declared security scheme.
    assert "titleLocked" in schemas["SessionSummary"]["properties"]
    assert schemas["SessionSave"]["additionalProperties"] is False
    assert schemas["AgentRuntimeSettingsPatch"]["minProperties"] == 1
    assert document["components"]["securitySchemes"]["popagentKey"]["name"] == "x-popagent-key"
    assert document["paths"]["/api/sessions/{session_id}"]["put"]["responses"]["409"]

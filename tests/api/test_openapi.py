"""The OpenAPI document the UI is typed from: the export script prints what the live app serves."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

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


def test_a_created_session_links_to_its_chat_hooks_and_delete() -> None:
    """Issue 23, finding 7: stateful clients (and Schemathesis' stateful phase) follow links."""
    from popagent_gateway.openapi import document

    paths: Any = document()["paths"]
    links = paths["/api/sessions"]["post"]["responses"]["201"]["links"]
    ids = {
        operation["operationId"]: (method, path) for path, item in paths.items() for method, operation in item.items()
    }
    targets = {name: ids[link["operationId"]] for name, link in links.items()}
    assert targets["Chat"] == ("post", "/api/chat")
    assert links["Chat"]["requestBody"] == {"id": "$response.body#/id"}
    assert targets["SessionHookRuns"] == ("get", "/api/sessions/{session_id}/hooks")
    assert targets["DeleteSession"] == ("delete", "/api/sessions/{session_id}")
    for name in ("GetSession", "SaveSession", "UpdateSession", "SessionHookRuns", "DeleteSession"):
        assert links[name]["parameters"] == {"session_id": "$response.body#/id"}


def test_chat_declares_its_sse_answer() -> None:
    from popagent_gateway.openapi import document

    paths: Any = document()["paths"]
    ok = paths["/api/chat"]["post"]["responses"]["200"]
    assert list(ok["content"]) == ["text/event-stream"]
    assert ok["headers"]["x-vercel-ai-ui-message-stream"]["schema"]["enum"] == ["v1"]
    conflict = paths["/api/chat"]["post"]["responses"]["409"]["content"]["application/json"]["schema"]
    assert [member["$ref"].rsplit("/", 1)[-1] for member in conflict["anyOf"]] == ["RunningTurnOut", "ErrorOut"]


def test_the_rules_the_services_enforce_are_declared() -> None:
    """Issue 23, finding 7: constraints enforced but undeclared (Schemathesis' positive and
    negative data checks find each one; tests/api/test_schemathesis.py runs them all)."""
    from popagent_gateway.openapi import document

    doc: Any = document()
    schemas = doc["components"]["schemas"]
    paths = doc["paths"]
    provision = schemas["SecretProvision"]["properties"]
    assert provision["name"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
    assert provision["resourceId"]["pattern"] == "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
    assert schemas["OriginBind"]["properties"]["origin"]["pattern"].startswith("^https://")
    [secret_id] = paths["/api/secrets/{secret_id}"]["delete"]["parameters"]
    assert secret_id["schema"]["pattern"].startswith("^[0-9a-fA-F]{8}-")
    for cron in (
        schemas["ScheduleCreate"]["properties"]["cron"],
        schemas["AutonomySettingsPatch"]["properties"]["selfUpdateCron"],
    ):
        assert cron["pattern"].startswith("^(?:\\*|")
    parts = schemas["UserMessage"]["properties"]["parts"]
    assert (parts["minItems"], parts["maxItems"]) == (1, 64)
    assert schemas["FeedbackCreate"]["anyOf"] == [{"required": ["messageId"]}, {"required": ["turnId"]}]
    assert {"required": ["skillMd"], "maxProperties": 1} in schemas["SkillCreate"]["anyOf"]
    assert schemas["SessionSave"]["properties"]["revision"]["maximum"] == 2**53 - 1
    # Nullable only where null means "clear": a PATCH field that refuses null does not offer it.
    assert "anyOf" not in schemas["MemoryPatch"]["properties"]["kind"]
    # json_bounds' rules on every body: no NUL in a string or a key; free-form JSON within 64 bits.
    assert provision["value"]["not"] == {"pattern": "\\x00"}
    assert schemas["SkillCreate"]["properties"]["references"]["propertyNames"] == {"not": {"pattern": "\\x00"}}
    assert schemas["UIPart"]["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
    integer = next(member for member in schemas["JsonValue"]["anyOf"] if member.get("type") == "integer")
    assert (integer["minimum"], integer["maximum"]) == (-(2**63), 2**63 - 1)
    # A state the request cannot know of is a 409, not a 400 "your request is wrong".
    assert "not in a state" in paths["/api/workspaces/{workspace_id}"]["delete"]["responses"]["409"]["description"]


def test_an_integral_number_is_an_integer_and_nothing_else_is() -> None:
    """JSON has one number type, and JSON Schema's `integer` takes 3.0: so does every body."""
    import pydantic

    from popagent_gateway.dto.settings import MemorySettingsPatch

    assert MemorySettingsPatch.model_validate({"idleActivationSeconds": 4348.0}).idle_activation_seconds == 4348
    for wrong in (4348.5, "4348", True):
        try:
            MemorySettingsPatch.model_validate({"idleActivationSeconds": wrong})
        except pydantic.ValidationError:
            continue
        raise AssertionError(f"{wrong!r} was taken for an integer")

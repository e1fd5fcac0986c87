"""The four settings singletons over real HTTP: read, partial update, ranges, cross-field rules,
unknown models, and the seeded-once rows."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from popagent_agent_runner.state import settings_rules
from popagent_gateway.dto.settings import AgentRuntimeSettingsPatch, MemorySettingsPatch
from support.stacks import Stack


@contextlib.asynccontextmanager
async def restoring(client: httpx.AsyncClient, path: str) -> AsyncIterator[dict[str, Any]]:
    """Put a singleton back as it was, so tests sharing the stack see the seeded values."""
    before = (await client.get(path)).json()
    try:
        yield before
    finally:
        before.pop("updatedAt")
        assert (await client.patch(path, json=before)).status_code == 200


def violation_fields(response: httpx.Response) -> list[str]:
    return [detail["loc"][-1] for detail in response.json()["details"]]


async def test_agent_runtime_settings_are_seeded_once_with_the_spec_values(client: httpx.AsyncClient) -> None:
    settings = (await client.get("/api/settings/agent-runtime")).json()
    assert settings["maxProcessorRetries"] == 3
    assert settings["defaultModel"] == "cx/gpt-5.3-codex"
    assert settings["taskHeartbeatTimeoutMs"] > settings["taskHeartbeatIntervalMs"]
    assert set(settings) == {
        *(rule.field for rule in (settings_rules.Violation(c, "") for c in settings_rules.AGENT_RUNTIME.fields)),
        "updatedAt",
    }


async def test_agent_runtime_patch_changes_only_the_fields_sent(client: httpx.AsyncClient) -> None:
    async with restoring(client, "/api/settings/agent-runtime") as before:
        response = await client.patch(
            "/api/settings/agent-runtime", json={"supervisorMaxSteps": 30, "defaultModel": "fake/fake-chat"}
        )
        assert response.status_code == 200, response.text
        after = response.json()
        assert after["supervisorMaxSteps"] == 30
        assert after["defaultModel"] == "fake/fake-chat"
        assert "x-popagent-warning" not in response.headers
        unchanged = {k: v for k, v in after.items() if k not in {"supervisorMaxSteps", "defaultModel", "updatedAt"}}
        assert unchanged == {k: v for k, v in before.items() if k in unchanged}
        assert (await client.get("/api/settings/agent-runtime")).json() == after
        models = (await client.get("/api/models")).json()
        assert models["defaultModel"] == "fake/fake-chat"


@pytest.mark.parametrize(
    ("section", "body", "field"),
    [
        ("agent-runtime", {"supervisorMaxSteps": 1}, "supervisorMaxSteps"),
        ("agent-runtime", {"supervisorMaxSteps": 201}, "supervisorMaxSteps"),
        ("agent-runtime", {"maxProcessorRetries": -1}, "maxProcessorRetries"),
        ("agent-runtime", {"taskConcurrency": "4"}, "taskConcurrency"),
        # 4.0 is the integer 4 (JSON has one number type); 4.5 is not an integer.
        ("agent-runtime", {"taskConcurrency": 4.5}, "taskConcurrency"),
        ("agent-runtime", {"maxConcurrentToolCalls": True}, "maxConcurrentToolCalls"),
        ("agent-runtime", {"finalResponseFeedback": ""}, "finalResponseFeedback"),
        ("agent-runtime", {"delegationFailureText": "x" * 4001}, "delegationFailureText"),
        ("agent-runtime", {"defaultModel": None}, "defaultModel"),
        ("agent-runtime", {"default_model": "fake/fake-chat"}, "default_model"),
        ("agent-runtime", {"noSuchSetting": 1}, "noSuchSetting"),
        ("memory", {"observationMessageTokens": 999}, "observationMessageTokens"),
        ("memory", {"observationBufferActivation": 1.5}, "observationBufferActivation"),
        ("memory", {"observationBlockAfter": 0.5}, "observationBlockAfter"),
        ("memory", {"retrievalScope": "everything"}, "retrievalScope"),
        ("memory", {"enabled": "yes"}, "enabled"),
        ("memory", {"reflectorInstructions": "x" * 8001}, "reflectorInstructions"),
    ],
)
async def test_a_settings_patch_refuses_bad_fields_by_name(
    client: httpx.AsyncClient, section: str, body: dict[str, Any], field: str
) -> None:
    response = await client.patch(f"/api/settings/{section}", json=body)
    assert response.status_code == 422, response.text
    assert field in violation_fields(response)


async def test_cross_field_rules_are_checked_on_the_merged_row(client: httpx.AsyncClient) -> None:
    current = (await client.get("/api/settings/agent-runtime")).json()
    # Each value is in range on its own; together with the stored interval it is not.
    response = await client.patch(
        "/api/settings/agent-runtime", json={"taskHeartbeatTimeoutMs": current["taskHeartbeatIntervalMs"]}
    )
    assert response.status_code == 422
    assert violation_fields(response) == ["taskHeartbeatTimeoutMs"]
    capped = await client.patch("/api/settings/agent-runtime", json={"taskRetryBaseMs": current["taskRetryCapMs"] + 1})
    assert capped.status_code == 422
    assert violation_fields(capped) == ["taskRetryCapMs"]
    assert (await client.get("/api/settings/agent-runtime")).json() == current


async def test_unknown_default_models_are_refused_against_the_catalog(client: httpx.AsyncClient) -> None:
    before = (await client.get("/api/settings/agent-runtime")).json()
    response = await client.patch("/api/settings/agent-runtime", json={"defaultModel": "nobody/no-model"})
    assert response.status_code == 404
    assert "unknown model" in response.json()["error"]
    assert (await client.get("/api/settings/agent-runtime")).json() == before


async def test_memory_settings_patch_and_the_shared_budget_rule(client: httpx.AsyncClient) -> None:
    async with restoring(client, "/api/settings/memory") as before:
        assert before["enabled"] is True and before["retrievalScope"] == "thread"
        refused = await client.patch("/api/settings/memory", json={"sharedBudget": True})
        assert refused.status_code == 422
        assert violation_fields(refused) == ["sharedBudget"]
        accepted = await client.patch(
            "/api/settings/memory",
            json={
                "sharedBudget": True,
                "asyncObservationEnabled": False,
                "asyncReflectionEnabled": False,
                "retrievalScope": "resource",
                "observationBufferActivation": 0.3,
                "observerInstructions": "Keep file paths verbatim.",
            },
        )
        assert accepted.status_code == 200, accepted.text
        body = accepted.json()
        assert body["sharedBudget"] is True and body["retrievalScope"] == "resource"
        assert body["observationBufferActivation"] == pytest.approx(0.3)
        # Re-enabling async buffering while budgets are shared is refused.
        again = await client.patch("/api/settings/memory", json={"asyncReflectionEnabled": True})
        assert again.status_code == 422
        assert violation_fields(again) == ["sharedBudget"]
        # The restore order matters: turn sharing off before async buffering comes back.
        assert (await client.patch("/api/settings/memory", json={"sharedBudget": False})).status_code == 200


async def test_autonomy_settings_toggle_and_cron_validation(client: httpx.AsyncClient) -> None:
    async with restoring(client, "/api/settings/autonomy") as before:
        assert before["evolutionEnabled"] is False
        changed = await client.patch(
            "/api/settings/autonomy", json={"evolutionEnabled": True, "selfUpdateCron": "30 2 * * 1"}
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["evolutionEnabled"] is True
        assert changed.json()["selfUpdateCron"] == "30 2 * * 1"
        assert changed.json()["skillCreationEnabled"] == before["skillCreationEnabled"]
        for cron in ("61 * * * *", "0 3 * * * *", "@daily   x", "every day"):
            bad = await client.patch("/api/settings/autonomy", json={"selfUpdateCron": cron})
            assert bad.status_code == 422, cron
            assert violation_fields(bad) == ["selfUpdateCron"]
        assert (await client.get("/api/settings/autonomy")).json()["selfUpdateCron"] == "30 2 * * 1"


async def test_browser_setting_toggles_immediately(client: httpx.AsyncClient) -> None:
    async with restoring(client, "/api/settings/browser") as before:
        flipped = await client.patch("/api/settings/browser", json={"enabled": not before["enabled"]})
        assert flipped.status_code == 200
        assert (await client.get("/api/settings/browser")).json()["enabled"] is (not before["enabled"])
    for body in ({}, {"enabled": None}, {"enabled": 1}, {"enabled": True, "other": 1}):
        assert (await client.patch("/api/settings/browser", json=body)).status_code == 422, body


async def test_a_missing_singleton_row_is_a_configuration_error_not_a_default(api_stack: Stack) -> None:
    async with api_stack.db("browser_bridge") as conn:
        row = await conn.fetchrow("SELECT * FROM popagent_browser_settings WHERE id = 1")
        assert row is not None
        await conn.execute("DELETE FROM popagent_browser_settings")
        try:
            async with api_stack.client() as client:
                response = await client.get("/api/settings/browser")
                assert response.status_code == 409
                assert "missing" in response.json()["error"]
        finally:
            await conn.execute(
                "INSERT INTO popagent_browser_settings (id, enabled, allow_code_execution, updated_at)"
                " VALUES (1, $1, $2, $3)",
                row["enabled"],
                row["allow_code_execution"],
                row["updated_at"],
            )
    async with api_stack.db("agent_runner") as conn:
        ledger = await conn.fetch("SELECT name FROM popagent_data_migrations ORDER BY name")
    assert [r["name"] for r in ledger] == [
        "0001_seed_default_workspace.sql",
        "0002_seed_agent_runtime_settings.sql",
        "0003_seed_memory_settings.sql",
        "0004_seed_agent_roles.sql",
        "0005_drop_unregistered_tools.sql",
        "0006_add_web_tools.sql",
        "0007_seed_command_timeout.sql",
        "0008_add_lsp_inspect.sql",
        "0009_add_search_docs.sql",
        "0010_seed_agent_skills.sql",
        "0011_add_recall_tool.sql",
        "0012_add_browser_tools.sql",
        "0013_seed_continue_on_disconnect.sql",
        "0014_seed_supervisor_approvals.sql",
        "0015_specialists_inherit_the_default_model.sql",
    ]


def _bounds(model: type, field: str) -> tuple[float | None, float | None]:
    schema = model.model_json_schema(by_alias=False)["properties"][field]  # type: ignore[attr-defined]
    return schema.get("minimum", schema.get("minLength")), schema.get("maximum", schema.get("maxLength"))


@pytest.mark.parametrize(
    ("rules", "dto"),
    [(settings_rules.AGENT_RUNTIME, AgentRuntimeSettingsPatch), (settings_rules.MEMORY, MemorySettingsPatch)],
)
def test_the_wire_bounds_match_the_owning_services_rules(rules: settings_rules.SettingsRules, dto: type) -> None:
    assert set(rules.fields) == set(dto.model_fields)  # type: ignore[attr-defined]
    for column, spec in rules.fields.items():
        if isinstance(spec, settings_rules.IntRange | settings_rules.FloatRange):
            assert _bounds(dto, column) == (spec.lo, spec.hi), column
        elif isinstance(spec, settings_rules.Text):
            assert _bounds(dto, column) == (spec.min_length or None, spec.max_length), column


async def test_the_command_timeout_is_an_agent_runtime_setting_up_to_600_s(api_stack: Stack) -> None:
    async with api_stack.client() as client:
        assert (await client.get("/api/settings/agent-runtime")).json()["commandTimeoutMs"] == 120_000
        too_long = await client.patch("/api/settings/agent-runtime", json={"commandTimeoutMs": 600_001})
        assert too_long.status_code in (400, 422), too_long.text
        changed = await client.patch("/api/settings/agent-runtime", json={"commandTimeoutMs": 30_000})
        assert changed.status_code == 200, changed.text
        assert changed.json()["commandTimeoutMs"] == 30_000
        await client.patch("/api/settings/agent-runtime", json={"commandTimeoutMs": 120_000})

"""Every memory setting is explained in one line in the OpenAPI document (the settings page shows it)."""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from popagent_agent_runner.state.settings_rules import MEMORY
from popagent_gateway.dto.settings import MEMORY_SETTING_HELP
from support.stacks import Stack


async def test_each_memory_setting_has_a_one_line_description(stack: Stack) -> None:
    assert set(MEMORY_SETTING_HELP) == set(MEMORY.fields) and len(MEMORY.fields) == 19
    async with stack.client() as client:
        document = (await client.get("/openapi.json")).json()
    for schema in ("MemorySettingsPatch", "MemorySettingsOut"):
        properties = document["components"]["schemas"][schema]["properties"]
        for column in MEMORY.fields:
            description = properties[to_camel(column)].get("description", "")
            assert description and "\n" not in description, (schema, column)

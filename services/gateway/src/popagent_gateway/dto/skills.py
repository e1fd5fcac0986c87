"""Agent Skills of one agent (popagent_agent_skills), also written and read as SKILL.md."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireInput, WireModel

SKILL_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
SkillName = Annotated[str, Field(min_length=1, max_length=64, pattern=SKILL_NAME_PATTERN)]
Description = Annotated[str, Field(min_length=1, max_length=1024)]
Instructions = Annotated[str, Field(min_length=1, max_length=50_000)]
References = Annotated[dict[str, str], Field(max_length=20)]
Metadata = Annotated[dict[str, str], Field(max_length=32)]
SourceUrl = Annotated[str, Field(max_length=2000, pattern=r"^(https?://\S+)?$")]
SkillMd = Annotated[str, Field(min_length=1, max_length=2 * 1024 * 1024)]
# A skillMd comes alone (`_one_source`).
_SKILL_MD_ALONE: dict[str, Any] = {"maxProperties": 1}
_NO_SKILL_MD: dict[str, Any] = {"not": {"required": ["skillMd"]}}


class SkillOut(WireModel):
    id: str
    agent_id: str
    name: str = Field(description="Agent Skills name: lowercase letters, digits and single hyphens")
    description: str = Field(description="what the agent reads in its skill catalog to decide when to load it")
    instructions: str = Field(description="the Markdown instructions the `skill` tool loads")
    references: dict[str, str] = Field(description="named references (relative path -> text) read with `skill_read`")
    source_url: str
    attribution: str
    license: str
    compatibility: str
    metadata: dict[str, str]
    enabled: bool = Field(description="a disabled skill stays editable but never reaches a run")
    evolution_managed: bool = Field(description="true for a skill learning manages; false for a user skill")
    created_at: str
    updated_at: str
    skill_md: str = Field(description="the skill exported as a SKILL.md (YAML front matter and body)")


class SkillListOut(WireModel):
    skills: list[SkillOut]


class _SkillFields(WireInput):
    name: SkillName | SkipJsonSchema[None] = None
    description: Description | SkipJsonSchema[None] = None
    instructions: Instructions | SkipJsonSchema[None] = None
    references: References | SkipJsonSchema[None] = None
    source_url: SourceUrl | SkipJsonSchema[None] = None
    attribution: Annotated[str, Field(max_length=1000)] | SkipJsonSchema[None] = None
    license: Annotated[str, Field(max_length=200)] | SkipJsonSchema[None] = None
    compatibility: Annotated[str, Field(max_length=500)] | SkipJsonSchema[None] = None
    metadata: Metadata | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    skill_md: SkillMd | SkipJsonSchema[None] = Field(
        default=None, description="a whole SKILL.md instead of the other fields (import)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> Any:
        if self.skill_md is not None and len(self.model_fields_set) > 1:
            raise ValueError("send either skillMd or the skill's fields, not both")
        return self


class SkillCreate(_SkillFields):
    """A new skill: `name`, `description` and `instructions` (the rest optional), or a `skillMd`."""

    SCHEMA_RULES: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": ["skillMd"], **_SKILL_MD_ALONE},
            {"required": ["name", "description", "instructions"], **_NO_SKILL_MD},
        ]
    }

    @model_validator(mode="after")
    def _complete(self) -> Any:
        if self.skill_md is None and (self.name is None or self.description is None or self.instructions is None):
            raise ValueError("a skill needs name, description and instructions (or a skillMd)")
        return self


class SkillPatch(PatchModel, _SkillFields):
    """Only the fields sent change; a `skillMd` replaces every field of the skill."""

    SCHEMA_RULES: ClassVar[dict[str, Any]] = {"anyOf": [_NO_SKILL_MD, _SKILL_MD_ALONE]}

"""The agents' user-managed Agent Skills (popagent_agent_skills), and their SKILL.md form.

A skill follows the Agent Skills format (agentskills.io): a name of lowercase letters,
digits and single hyphens (1-64), a description of at most 1,024 characters, Markdown
instructions, and references loaded on demand. As a SKILL.md it is YAML front matter
(`name`, `description`, `license`, `compatibility`, `metadata`, `allowed-tools`) plus the
body; what the format has no field for (provenance, enablement, references) travels in
`metadata` under `popagent-*` keys, so an export imports back unchanged.

A SKILL.md is written by whoever imports it (or by a page it was copied from): its front
matter is read by `_FrontMatterLoader`, PyYAML's safe loader with anchors and aliases
refused (a 501-byte alias bomb held a worker 30 s at 680 MB: aliases make a document
exponentially larger than its text) and nesting bounded (`MAX_FRONT_MATTER_DEPTH`: the
composer recurses, and 5,000 `[` were a RecursionError). The whole file is at most
`MAX_SKILL_MD_CHARS`; the servicer parses it in a worker thread, off the event loop.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson
import yaml
from asyncpg.pool import PoolConnectionProxy
from yaml.composer import ComposerError

from popagent_core.db import record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound

NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
REFERENCE_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_URL = re.compile(r"^https?://\S+$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_INSTRUCTIONS = 50_000
MAX_REFERENCES = 20
MAX_REFERENCE_CHARS = 50_000
MAX_METADATA = 32
MAX_SKILLS_PER_AGENT = 100
MAX_SKILL_MD_CHARS = 2 * 1024 * 1024
# The format's front matter is a mapping of scalars, `metadata` one level below and
# `allowed-tools` a scalar or a list: a few levels; deeper is not a SKILL.md.
MAX_FRONT_MATTER_DEPTH = 8
# The SKILL.md front-matter keys (the Agent Skills specification's six).
FRONT_MATTER_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
SOURCE_URL_KEY = "popagent-source-url"
ATTRIBUTION_KEY = "popagent-attribution"
ENABLED_KEY = "popagent-enabled"
REFERENCE_PREFIX = "popagent-reference:"


@dataclass(frozen=True, slots=True)
class SkillRecord:
    """One stored skill of one agent."""

    id: str
    agent_id: str
    name: str
    description: str
    instructions: str
    references: dict[str, str]
    source_url: str
    attribution: str
    license: str
    compatibility: str
    metadata: dict[str, str]
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SkillFields:
    """What a create or update sets; None leaves a value as it is (a create starts from empty)."""

    name: str | None = None
    description: str | None = None
    instructions: str | None = None
    references: dict[str, str] | None = None
    source_url: str | None = None
    attribution: str | None = None
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] | None = None
    enabled: bool | None = None


def _skill(row: asyncpg.Record) -> SkillRecord:
    return record_of(
        SkillRecord,
        row,
        id=str(row["id"]),
        references=orjson.loads(row["named_references"]),
        metadata=orjson.loads(row["metadata"]),
    )


def _text(field: str, value: str, lo: int, hi: int) -> str:
    if not lo <= len(value) <= hi or "\x00" in value:
        raise InvalidArgument(f"{field} must be {lo} to {hi} characters")
    return value


def name_violation(name: str) -> str | None:
    """Why `name` is not an Agent Skills name, or None."""
    if not 1 <= len(name) <= MAX_NAME or not NAME.match(name):
        return "name must be 1 to 64 lowercase letters, digits and single hyphens, not starting or ending with one"
    return None


def _references(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_REFERENCES:
        raise InvalidArgument(f"references: at most {MAX_REFERENCES}")
    for path, text in value.items():
        if len(path) > 200 or not REFERENCE_PATH.match(path) or ".." in path.split("/"):
            raise InvalidArgument(f"references: {path[:80]!r} must be a relative path without '..'")
        _text(f"references[{path}]", text, 0, MAX_REFERENCE_CHARS)
    return dict(value)


def _metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_METADATA:
        raise InvalidArgument(f"metadata: at most {MAX_METADATA} entries")
    for key, text in value.items():
        _text("metadata key", key, 1, 100)
        _text(f"metadata[{key}]", text, 0, 2000)
    return dict(value)


def checked(current: SkillRecord, changes: SkillFields) -> SkillRecord:
    """The skill as `changes` would leave it; InvalidArgument naming the first bad field."""
    row = dataclasses.asdict(current)
    if changes.name is not None:
        if problem := name_violation(changes.name):
            raise InvalidArgument(problem)
        row["name"] = changes.name
    if changes.description is not None:
        if not changes.description.strip():
            raise InvalidArgument("description must not be blank")
        row["description"] = _text("description", changes.description, 1, MAX_DESCRIPTION)
    if changes.instructions is not None:
        row["instructions"] = _text("instructions", changes.instructions, 1, MAX_INSTRUCTIONS)
    if changes.references is not None:
        row["references"] = _references(changes.references)
    if changes.source_url is not None:
        if changes.source_url and not _URL.match(changes.source_url):
            raise InvalidArgument("sourceUrl must be an http(s) URL or empty")
        row["source_url"] = _text("sourceUrl", changes.source_url, 0, 2000)
    if changes.attribution is not None:
        row["attribution"] = _text("attribution", changes.attribution, 0, 1000)
    if changes.license is not None:
        row["license"] = _text("license", changes.license, 0, 200)
    if changes.compatibility is not None:
        row["compatibility"] = _text("compatibility", changes.compatibility, 0, 500)
    if changes.metadata is not None:
        row["metadata"] = _metadata(changes.metadata)
    if changes.enabled is not None:
        row["enabled"] = changes.enabled
    record = SkillRecord(**row)
    if not record.name or not record.description or not record.instructions:
        raise InvalidArgument("a skill needs a name, a description and instructions")
    return record


# SKILL.md --------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as YAML block literals, so an exported SKILL.md stays readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") and value == value.rstrip(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_skill_md(skill: SkillRecord) -> str:
    """The skill as a SKILL.md: YAML front matter, then the instructions."""
    front: dict[str, Any] = {"name": skill.name, "description": skill.description}
    if skill.license:
        front["license"] = skill.license
    if skill.compatibility:
        front["compatibility"] = skill.compatibility
    metadata: dict[str, str] = {k: v for k, v in skill.metadata.items() if k != "allowed-tools"}
    metadata[SOURCE_URL_KEY] = skill.source_url
    metadata[ATTRIBUTION_KEY] = skill.attribution
    metadata[ENABLED_KEY] = "true" if skill.enabled else "false"
    for path, text in sorted(skill.references.items()):
        metadata[REFERENCE_PREFIX + path] = text
    front["metadata"] = metadata
    if "allowed-tools" in skill.metadata:
        front["allowed-tools"] = skill.metadata["allowed-tools"]
    head = yaml.dump(front, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100_000)
    return f"---\n{head}---\n{skill.instructions}"


class _FrontMatterLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases, its nesting bounded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:  # type: ignore[override]
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ComposerError(
                None, None, "anchors and aliases (& and *) are not accepted in SKILL.md front matter", event.start_mark
            )
        if self._depth >= MAX_FRONT_MATTER_DEPTH:
            raise ComposerError(
                None, None, f"the front matter is nested more than {MAX_FRONT_MATTER_DEPTH} levels", event.start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1


def _load_front_matter(text: str) -> object:
    loader = _FrontMatterLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_skill_md(text: str) -> SkillFields:
    """The fields a SKILL.md carries; InvalidArgument saying what is wrong with it.

    Every field is set, so an update from a SKILL.md replaces the whole skill.
    """
    if len(text) > MAX_SKILL_MD_CHARS:
        raise InvalidArgument("skillMd is too large")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if not text.startswith("---\n"):
        raise InvalidArgument("skillMd must start with YAML front matter between '---' lines")
    end = text.find("\n---\n", 3)
    if end < 0:
        if text.endswith("\n---"):
            end = len(text) - 4
        else:
            raise InvalidArgument("skillMd: the front matter has no closing '---' line")
    try:
        front = _load_front_matter(text[4 : end + 1])
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"skillMd: the front matter is not valid YAML ({str(exc)[:200]})") from None
    if not isinstance(front, dict):
        raise InvalidArgument("skillMd: the front matter must be a YAML mapping")
    unknown = [str(key) for key in front if key not in FRONT_MATTER_KEYS]
    if unknown:
        raise InvalidArgument(f"skillMd: unknown front-matter fields: {', '.join(unknown)}")
    for key in ("name", "description"):
        if not isinstance(front.get(key), str):
            raise InvalidArgument(f"skillMd: the front matter needs a {key} string")
    raw_metadata = front.get("metadata") or {}
    if not isinstance(raw_metadata, dict):
        raise InvalidArgument("skillMd: metadata must be a mapping of strings")
    # As the reference parser does: metadata values are strings, whatever YAML made of them.
    metadata = {str(k): _yaml_string(v) for k, v in raw_metadata.items()}
    references = {
        key.removeprefix(REFERENCE_PREFIX): metadata.pop(key)
        for key in list(metadata)
        if key.startswith(REFERENCE_PREFIX)
    }
    enabled = metadata.pop(ENABLED_KEY, "true").strip().lower() not in ("false", "no", "0")
    if "allowed-tools" in front:
        # Experimental in the specification, and never a grant here: kept only so the file round-trips.
        metadata["allowed-tools"] = _yaml_string(front["allowed-tools"])
    body = text[end + 5 :]
    return SkillFields(
        name=front["name"],
        description=front["description"],
        instructions=body,
        references=references,
        source_url=metadata.pop(SOURCE_URL_KEY, ""),
        attribution=metadata.pop(ATTRIBUTION_KEY, ""),
        license=_yaml_string(front.get("license") or ""),
        compatibility=_yaml_string(front.get("compatibility") or ""),
        metadata=metadata,
        enabled=enabled,
    )


def _yaml_string(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


# Store -----------------------------------------------------------------------------------


def _empty(agent_id: str) -> SkillRecord:
    now = datetime.now().astimezone()
    return SkillRecord(
        id=str(uuid.uuid4()),
        agent_id=agent_id,
        name="",
        description="",
        instructions="",
        references={},
        source_url="",
        attribution="",
        license="",
        compatibility="",
        metadata={},
        enabled=True,
        created_at=now,
        updated_at=now,
    )


class SkillStore:
    def __init__(self, pool: asyncpg.Pool, queries: dict[str, str]) -> None:
        self.pool = pool
        self.q = queries

    async def list(self, agent_id: str) -> list[SkillRecord]:
        with wrap_db_errors():
            async with self.pool.acquire() as conn:
                await self._agent_exists(conn, agent_id)
                return [_skill(row) for row in await conn.fetch(self.q["list_agent_skills"], agent_id)]

    async def create(self, agent_id: str, fields: SkillFields) -> SkillRecord:
        skill = checked(_empty(agent_id), fields)
        try:
            with wrap_db_errors():
                async with self.pool.acquire() as conn, conn.transaction():
                    await self._agent_exists(conn, agent_id, lock=True)
                    if await conn.fetchval(self.q["count_agent_skills"], agent_id) >= MAX_SKILLS_PER_AGENT:
                        raise InvalidArgument(f"an agent has at most {MAX_SKILLS_PER_AGENT} skills")
                    row = await conn.fetchrow(self.q["insert_agent_skill"], *self._values(skill))
        except AlreadyExists:
            raise AlreadyExists(f"agent {agent_id!r} already has a skill named {skill.name!r}") from None
        return _skill(row)

    async def update(self, agent_id: str, skill_id: str, changes: SkillFields) -> SkillRecord:
        key = _uuid(skill_id)
        try:
            with wrap_db_errors():
                async with self.pool.acquire() as conn, conn.transaction():
                    current = await conn.fetchrow(self.q["lock_agent_skill"], agent_id, key)
                    if current is None:
                        raise NotFound(f"skill {skill_id!r} of agent {agent_id!r} not found")
                    skill = checked(_skill(current), changes)
                    row = await conn.fetchrow(self.q["update_agent_skill"], *self._values(skill))
        except AlreadyExists:
            raise AlreadyExists(f"agent {agent_id!r} already has a skill named {changes.name!r}") from None
        return _skill(row)

    async def delete(self, agent_id: str, skill_id: str) -> None:
        with wrap_db_errors():
            deleted = await self.pool.fetchval(self.q["delete_agent_skill"], agent_id, _uuid(skill_id))
        if deleted is None:
            raise NotFound(f"skill {skill_id!r} of agent {agent_id!r} not found")

    async def _agent_exists(
        self, conn: asyncpg.Connection | PoolConnectionProxy, agent_id: str, *, lock: bool = False
    ) -> None:
        found = await conn.fetchval(self.q["lock_agent_for_skills" if lock else "agent_exists"], agent_id)
        if found is None:
            raise NotFound(f"agent {agent_id!r} not found")

    @staticmethod
    def _values(skill: SkillRecord) -> tuple[object, ...]:
        return (
            uuid.UUID(skill.id),
            skill.agent_id,
            skill.name,
            skill.description,
            skill.instructions,
            orjson.dumps(skill.references).decode(),
            skill.source_url,
            skill.attribution,
            skill.license,
            skill.compatibility,
            orjson.dumps(skill.metadata).decode(),
            skill.enabled,
        )


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"skill {value!r} not found") from None

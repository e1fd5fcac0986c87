"""Learned overlays, learned skills and their append-only revisions: apply, revert, adopt, read.

Applying a proposal is one transaction: lock and reread the autonomy row, lock the claimed
signals this attempt still holds (a signal ignored or reclaimed meanwhile is no longer
held), and when a global or per-target policy is off, settle them as ignored before any
mutation. Otherwise render every selected strategy from its code-owned template and the
reflection's lesson, and refuse the whole proposal when anything leaves the learned
targets, any text carries a secret, the lesson repeats the evidence of the claimed signals
(`overlap`) or any text reads as an instruction aimed at tools, files or secrets
(`screen`); only then write the overlay sections or learned skills, append one revision
each, settle the signals and enqueue `LearningChanged`. An exception anywhere rolls
everything back; a refusal fails the attempt with its reason, which the signals show
(`lastError`, then a dead letter a user may ignore or retry), so nothing is refused silently.

Protected boundaries: a learned change is an overlay section or an evolution-managed
learned skill and nothing else. Tool membership, workspace and browser access, secrets,
hooks, authentication, execution bounds and the user's instructions and skills live in
other services' tables, which this code has no query for; `LEARNED_TARGETS` is checked
before every write.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from popagent.events.v1 import events_pb2
from popagent_core import subjects
from popagent_core.bus import enqueue_event
from popagent_core.db import record_of, wrap_db_errors
from popagent_core.errors import Conflict, InvalidArgument, NotFound
from popagent_core.secret_text import carries_secret
from popagent_evolution.overlap import quoted_run
from popagent_evolution.reflection import Reflection
from popagent_evolution.repo import QUERIES, _settings
from popagent_evolution.screen import instruction_like
from popagent_evolution.signals import Conn, SignalRecord, SignalRepo, fences
from popagent_evolution.strategies import (
    SKILL_STRATEGIES,
    Strategy,
    compose_overlay,
    learned_skill,
    overlay_section,
)

logger = logging.getLogger(__name__)

LEARNED_TARGETS = frozenset({"overlay", "skill"})
MAX_REVISIONS = 200


class SecretInProposal(InvalidArgument):
    """A learned change would carry something credential-like; nothing was written."""


class BoundaryViolation(InvalidArgument):
    """A learned change would reach past the learned targets; nothing was written."""


class QuotedEvidence(InvalidArgument):
    """Reflection's lesson repeats the evidence it was given; nothing was written."""


class InstructionInProposal(InvalidArgument):
    """A learned change reads as an instruction aimed at tools, files or secrets; nothing was written."""


@dataclass(frozen=True)
class RevisionRecord:
    id: str
    position: int
    target_kind: str
    target_key: str
    agent_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    strategy: str
    signal_ids: list[str]
    trace_ids: list[str]
    reverts_revision_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class LearnedSkill:
    id: str
    agent_id: str
    name: str
    description: str
    instructions: str


@dataclass(frozen=True)
class LearnedState:
    """What agent runs compose: overlay text and learned skills by agent."""

    overlays: dict[str, str]
    skills: dict[str, list[LearnedSkill]]


@dataclass
class ApplyOutcome:
    applied: list[str] = field(default_factory=list[str])
    dismissed: list[str] = field(default_factory=list[str])
    ignored: list[str] = field(default_factory=list[str])
    revisions: list[RevisionRecord] = field(default_factory=list[RevisionRecord])


@dataclass(frozen=True)
class _Change:
    target_kind: str
    agent_id: str
    strategy: Strategy
    cited: list[SignalRecord]
    # Reflection's own words, carried into the section or the skill by its template.
    lesson: str = ""
    # overlay: the section text; skill: the learned skill's text.
    section: str = ""
    skill_name: str = ""
    skill_description: str = ""
    skill_instructions: str = ""

    @property
    def target_key(self) -> str:
        return (
            f"overlay:{self.agent_id}" if self.target_kind == "overlay" else f"skill:{self.agent_id}:{self.skill_name}"
        )

    def texts(self) -> list[str]:
        return [self.lesson, self.section, self.skill_name, self.skill_description, self.skill_instructions]


def revision_of(row: asyncpg.Record) -> RevisionRecord:
    return record_of(
        RevisionRecord,
        row,
        id=str(row["id"]),
        before=orjson.loads(row["before"]) if row["before"] is not None else None,
        after=orjson.loads(row["after"]) if row["after"] is not None else None,
        signal_ids=[str(s) for s in row["signal_ids"]],
        trace_ids=list(row["trace_ids"]),
        reverts_revision_id=str(row["reverts_revision_id"]) if row["reverts_revision_id"] else None,
    )


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def render(agent_id: str, strategy: Strategy, cited: list[SignalRecord], lesson: str = "") -> _Change:
    """The change a strategy makes from its cited signals: code-owned text and the reflection's lesson,
    never a signal's goal or evidence."""
    classes = [s.failure_class for s in cited]
    if strategy in SKILL_STRATEGIES:
        skill = learned_skill(strategy, classes, lesson)
        return _Change(
            "skill",
            agent_id,
            strategy,
            cited,
            lesson=lesson,
            skill_name=skill.name,
            skill_description=skill.description,
            skill_instructions=skill.instructions,
        )
    return _Change(
        "overlay", agent_id, strategy, cited, lesson=lesson, section=overlay_section(strategy, classes, lesson)
    )


def check_change(change: _Change, read: list[SignalRecord]) -> None:
    """Refuse a change that reaches past the learned targets, carries a secret, repeats the evidence of the
    signals its reflection `read`, or reads as an instruction aimed at tools, files or secrets. The reasons
    name the rule, never the text: they are shown to users as the signals' last error."""
    if change.target_kind not in LEARNED_TARGETS:
        raise BoundaryViolation(f"a learned change may only write {sorted(LEARNED_TARGETS)}, not {change.target_kind}")
    if any(carries_secret(text) for text in change.texts()):
        raise SecretInProposal(f"proposal rejected: {change.strategy} would quote something credential-like")
    # Every claimed signal, not only the cited ones: an injected signal may be echoed under another's citation.
    quoted = quoted_run(change.lesson, (text for s in read for text in (s.goal, s.evidence)))
    if quoted:
        raise QuotedEvidence(f"proposal rejected: the lesson for {change.strategy} {quoted}")
    for text in change.texts():
        reason = instruction_like(text)
        if reason:
            raise InstructionInProposal(f"proposal rejected: the text of {change.strategy} {reason}")


async def _changed(conn: Conn) -> None:
    await enqueue_event(conn, subjects.LEARNING_CHANGED, events_pb2.LearningChanged().SerializeToString())


class LearnedStore:
    def __init__(self, pool: asyncpg.Pool, signals: SignalRepo) -> None:
        self.pool = pool
        self.signals = signals

    # Apply ------------------------------------------------------------------------------

    async def apply(self, agent_id: str, claimed: list[SignalRecord], reflection: Reflection) -> ApplyOutcome:
        outcome = ApplyOutcome()
        ids, attempts = fences(claimed)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                settings = _settings(await conn.fetchrow(QUERIES["lock_autonomy_settings"]))
                held_ids = {str(row["id"]) for row in await conn.fetch(QUERIES["lock_claimed_signals"], ids, attempts)}
                held = [s for s in claimed if s.id in held_ids]
                if not settings.evolution_enabled:
                    # The global policy wins before any mutation.
                    await self.signals.settle(conn, held, "ignored", "evolution is disabled")
                    outcome.ignored = [s.id for s in held]
                    return outcome
                by_id = {s.id: s for s in held}
                changes: list[_Change] = []
                policy_ignored: set[str] = set()
                for selection in reflection.selections:
                    cited_ids = list(dict.fromkeys(selection.signal_ids))
                    if any(sid not in by_id for sid in cited_ids):
                        # A cited signal was ignored or reclaimed meanwhile: the selection lapses.
                        continue
                    cited = [by_id[sid] for sid in cited_ids]
                    if selection.strategy in SKILL_STRATEGIES and not settings.skill_creation_enabled:
                        policy_ignored.update(cited_ids)
                        continue
                    changes.append(render(agent_id, selection.strategy, cited, selection.lesson))
                for change in changes:
                    check_change(change, claimed)
                applied: set[str] = set()
                unchanged: set[str] = set()
                for change in changes:
                    revision = await self._write(conn, change)
                    if revision is not None:
                        outcome.revisions.append(revision)
                        applied.update(s.id for s in change.cited)
                    else:
                        unchanged.update(s.id for s in change.cited)
                unchanged -= applied
                policy_ignored -= applied | unchanged
                settled = applied | unchanged | policy_ignored
                dismissed = [s for s in held if s.id not in settled]
                await self.signals.settle(conn, [by_id[i] for i in applied], "applied")
                await self.signals.settle(
                    conn, [by_id[i] for i in policy_ignored], "ignored", "skill creation is disabled"
                )
                await self.signals.settle(
                    conn,
                    [by_id[i] for i in unchanged],
                    "dismissed",
                    "the learned target already holds this change, or a user adopted it",
                )
                await self.signals.settle(conn, dismissed, "dismissed", "no strategy selected it")
                outcome.applied = sorted(applied)
                outcome.ignored = sorted(policy_ignored)
                outcome.dismissed = sorted(unchanged) + [s.id for s in dismissed]
                if outcome.revisions:
                    await _changed(conn)
        return outcome

    async def _write(self, conn: Conn, change: _Change) -> RevisionRecord | None:
        """Write one change and append its revision; None when it would change nothing."""
        if change.target_kind == "overlay":
            row = await conn.fetchrow(QUERIES["lock_overlay"], change.agent_id)
            sections: dict[str, str] = orjson.loads(row["sections"]) if row is not None else {}
            before = {"sections": sections} if row is not None else None
            after = {"sections": {**sections, change.strategy.value: change.section}}
            if before == after:
                return None
            await conn.execute(QUERIES["upsert_overlay"], change.agent_id, orjson.dumps(after["sections"]).decode())
        else:
            row = await conn.fetchrow(QUERIES["lock_learned_skill"], change.agent_id, change.skill_name)
            after = {
                "name": change.skill_name,
                "description": change.skill_description,
                "instructions": change.skill_instructions,
            }
            if row is None:
                before = None
                await conn.execute(
                    QUERIES["insert_learned_skill"],
                    uuid.uuid4(),
                    change.agent_id,
                    change.skill_name,
                    change.skill_description,
                    change.skill_instructions,
                )
            elif not row["evolution_managed"]:
                # Adopted by a user: automatic changes never touch it again.
                return None
            else:
                before = _skill_content(row) if row["active"] else None
                if before == after:
                    return None
                await conn.execute(
                    QUERIES["set_learned_skill"],
                    change.agent_id,
                    change.skill_name,
                    change.skill_description,
                    change.skill_instructions,
                    True,
                )
        revision = await conn.fetchrow(
            QUERIES["insert_revision"],
            uuid.uuid4(),
            change.target_kind,
            change.target_key,
            change.agent_id,
            _json(before),
            _json(after),
            change.strategy.value,
            [uuid.UUID(s.id) for s in change.cited],
            sorted({s.trace_id for s in change.cited}),
            None,
        )
        assert revision is not None
        return revision_of(revision)

    # Revert -----------------------------------------------------------------------------

    async def revert(self, revision_id: str) -> RevisionRecord:
        """Append the compensating revision of `revision_id`; Conflict saying why when it cannot be."""
        key = _uuid(revision_id, "revision")
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["get_revision"], key)
                if row is None:
                    raise NotFound(f"revision {revision_id!r} not found")
                source = revision_of(row)
                if source.reverts_revision_id is not None:
                    raise Conflict("a revert cannot itself be reverted")
                current = await self._lock_target(conn, source)
                if await conn.fetchval(QUERIES["revert_of"], key) is not None:
                    raise Conflict("this revision was already reverted")
                if str(await conn.fetchval(QUERIES["latest_revision_of"], source.target_key)) != source.id:
                    raise Conflict("this revision is no longer the latest change of its target")
                if current != source.after:
                    raise Conflict("the target changed since this revision")
                await self._restore(conn, source)
                compensation = await conn.fetchrow(
                    QUERIES["insert_revision"],
                    uuid.uuid4(),
                    source.target_kind,
                    source.target_key,
                    source.agent_id,
                    _json(source.after),
                    _json(source.before),
                    "revert",
                    [uuid.UUID(s) for s in source.signal_ids],
                    source.trace_ids,
                    key,
                )
                await _changed(conn)
        assert compensation is not None
        return revision_of(compensation)

    async def _lock_target(self, conn: Conn, source: RevisionRecord) -> dict[str, Any] | None:
        """The target's current managed content, locked; Conflict when a user owns it now."""
        if source.target_kind == "overlay":
            row = await conn.fetchrow(QUERIES["lock_overlay"], source.agent_id)
            return {"sections": orjson.loads(row["sections"])} if row is not None else None
        name = source.target_key.rsplit(":", 1)[1]
        row = await conn.fetchrow(QUERIES["lock_learned_skill"], source.agent_id, name)
        if row is None:
            return None
        if not row["evolution_managed"]:
            raise Conflict("the learned skill was adopted by a user edit; it is no longer evolution's to revert")
        return _skill_content(row) if row["active"] else None

    async def _restore(self, conn: Conn, source: RevisionRecord) -> None:
        before = source.before
        if source.target_kind == "overlay":
            sections = before["sections"] if before else {}
            await conn.execute(QUERIES["upsert_overlay"], source.agent_id, orjson.dumps(sections).decode())
            return
        name = source.target_key.rsplit(":", 1)[1]
        assert source.after is not None
        content = before or source.after
        await conn.execute(
            QUERIES["set_learned_skill"],
            source.agent_id,
            name,
            content["description"],
            content["instructions"],
            before is not None,
        )

    # Adoption and reads -----------------------------------------------------------------

    async def adopt(self, agent_id: str, skill_id: str) -> LearnedSkill:
        """A user edited this learned skill: it is the user's now (agent-runner holds the copy)."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["adopt_learned_skill"], agent_id, _uuid(skill_id, "learned skill"))
                if row is None:
                    raise NotFound(f"learned skill {skill_id!r} of agent {agent_id!r} not found")
                await _changed(conn)
        return _learned(row)

    async def get_skill(self, agent_id: str, skill_id: str) -> LearnedSkill:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_learned_skill"], agent_id, _uuid(skill_id, "learned skill"))
        if row is None or not row["evolution_managed"] or not row["active"]:
            raise NotFound(f"learned skill {skill_id!r} of agent {agent_id!r} not found")
        return _learned(row)

    async def revisions(self, *, agent_id: str | None, limit: int) -> list[RevisionRecord]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_revisions"], agent_id, min(limit, MAX_REVISIONS))
        return [revision_of(row) for row in rows]

    async def state(self) -> LearnedState:
        """The learned overlays and skills agent runs compose, as the autonomy settings allow now."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn:
                settings = _settings(await conn.fetchrow(QUERIES["get_autonomy_settings"]))
                rows = await conn.fetch(QUERIES["learned_state"])
        overlays: dict[str, str] = {}
        skills: dict[str, list[LearnedSkill]] = {}
        if not settings.evolution_enabled:
            return LearnedState(overlays, skills)
        for row in rows:
            if row["kind"] == "overlay":
                text = compose_overlay(_screened(row["agent_id"], orjson.loads(row["body"])))
                if text:
                    overlays[row["agent_id"]] = text
            elif settings.skill_creation_enabled and _passes(row["agent_id"], row["name"], row["body"]):
                skills.setdefault(row["agent_id"], []).append(
                    LearnedSkill(row["id"], row["agent_id"], row["name"], row["description"], row["body"])
                )
        return LearnedState(overlays, skills)


def _passes(agent_id: str, target: str, text: str) -> bool:
    """Whether learned text stored before the screen existed (or before a rule was added) may reach runs."""
    reason = instruction_like(text)
    if reason:
        # Left in place, so a user sees it among the revisions and can revert it.
        logger.warning(
            "learned text withheld from runs", extra={"agent_id": agent_id, "target": target, "reason": reason}
        )
    return reason is None


def _screened(agent_id: str, sections: dict[str, str]) -> dict[str, str]:
    return {strategy: text for strategy, text in sections.items() if _passes(agent_id, strategy, text)}


def _skill_content(row: asyncpg.Record) -> dict[str, Any]:
    return {"name": row["name"], "description": row["description"], "instructions": row["instructions"]}


def _learned(row: asyncpg.Record) -> LearnedSkill:
    return LearnedSkill(str(row["id"]), row["agent_id"], row["name"], row["description"], row["instructions"])


def _uuid(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"{what} {value!r} not found") from None

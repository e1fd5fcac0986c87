"""`python -m popagent_agent_runner repair` on a database made inconsistent on purpose: a chat thread
whose session is gone (with its messages and a specialist thread), turn records, an approval and a
tool grant of a session that no longer exists, and a session whose deletion stopped half way. The
dry run reports them and changes nothing; the repair removes them, finishes the deletion (its
SessionEnd hook included), and leaves a healthy session and its thread alone."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import httpx
import orjson
import pytest

from support.stacks import SESSION_END_PATH, Stack
from support.waiting import eventually

# A repair is a process of its own that imports agent-runner: seconds on an idle machine, tens of
# seconds on a loaded one. The test runs three.
REPAIR_WITHIN_S = 240


async def run_repair(stack: Stack, *args: str) -> str:
    env = {**os.environ, **{name: str(value) for name, value in stack.runner_env.items()}}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "popagent_agent_runner",
        "repair",
        "--older-than",
        "60",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), REPAIR_WITHIN_S)
    assert process.returncode == 0, output.decode()
    return output.decode()


def lines_of(report: str) -> dict[str, str]:
    """The report's lines as kind -> what follows its colon (a line without one maps to itself)."""
    return dict(
        (line.split(": ", 1)[0], line.split(": ", 1)[1]) if ": " in line else (line, line)
        for line in report.splitlines()
    )


async def new_session(client: httpx.AsyncClient, title: str) -> str:
    created = await client.post("/api/sessions", json={"title": title})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


@pytest.mark.timeout(3 * REPAIR_WITHIN_S + 60)
async def test_repair_removes_what_lost_its_session_and_finishes_half_done_deletions(
    api_stack: Stack, client: httpx.AsyncClient
) -> None:
    tag = uuid.uuid4().hex[:8]
    healthy = await new_session(client, "healthy")
    half_deleted = await new_session(client, "half deleted")
    orphan, specialist, gone = f"orphan-{tag}", f"specialist-{tag}", f"gone-{tag}"
    message = orjson.dumps({"ui": {"id": "m1", "role": "user", "parts": []}}).decode()
    async with api_stack.db() as conn:
        for thread, parent in ((healthy, None), (orphan, None), (specialist, orphan)):
            resource = "popagent-user" if parent is None else "specialist:researcher"
            await conn.execute(
                "INSERT INTO popagent_threads (id, resource_id, parent_id, created_at)"
                " VALUES ($1, $2, $3, now() - interval '1 hour')",
                thread,
                resource,
                parent,
            )
            await conn.execute(
                "INSERT INTO popagent_thread_messages (thread_id, id, role, content) VALUES ($1, 'm1', 'user', $2)",
                thread,
                message,
            )
        await conn.execute(
            "INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until, started_at, ended_at)"
            " VALUES ($1, $2, 'completed', 'gone-runner', now(), now() - interval '1 hour', now() - interval '1 hour')",
            f"turn-{tag}",
            gone,
        )
        await conn.execute(
            "INSERT INTO popagent_approval_grants (session_id, tool_name, granted_by, approval_id, created_at)"
            " VALUES ($1, 'mastra_workspace_execute_command', 'api', 'appr-x', now() - interval '1 hour')",
            gone,
        )
        await conn.execute(
            "UPDATE popagent_sessions SET deleting_at = now() - interval '1 hour' WHERE id = $1", half_deleted
        )

    async def state() -> dict[str, object]:
        async with api_stack.db() as conn:
            return {
                "threads": sorted(
                    row["id"]
                    for row in await conn.fetch(
                        "SELECT id FROM popagent_threads WHERE id = ANY($1::text[])", [healthy, orphan, specialist]
                    )
                ),
                "messages": await conn.fetchval(
                    "SELECT count(*) FROM popagent_thread_messages WHERE thread_id = ANY($1::text[])",
                    [healthy, orphan, specialist],
                ),
                "turns": await conn.fetchval("SELECT count(*) FROM popagent_turns WHERE session_id = $1", gone),
                "grants": await conn.fetchval(
                    "SELECT count(*) FROM popagent_approval_grants WHERE session_id = $1", gone
                ),
                "sessions": sorted(
                    row["id"]
                    for row in await conn.fetch(
                        "SELECT id FROM popagent_sessions WHERE id = ANY($1::text[])", [healthy, half_deleted]
                    )
                ),
            }

    broken = await state()
    assert broken == {
        "threads": sorted([healthy, orphan, specialist]),
        "messages": 3,
        "turns": 1,
        "grants": 1,
        "sessions": sorted([healthy, half_deleted]),
    }

    # Other tests share this database: what they left is reported too, so only ours is asserted.
    report = lines_of(await run_repair(api_stack, "--dry-run"))
    assert half_deleted in report["sessions left half deleted"]
    assert orphan in report["chat threads without a session"]
    assert specialist not in report["chat threads without a session"]  # it goes with its parent
    assert f"turn-{tag}" in report["turn records without a session"]
    assert gone in report["sessions gone with tool grants left"]
    assert healthy not in "".join(report.values())
    assert "dry run" in report
    assert await state() == broken

    ends_before = len(api_stack.receiver.requests_for(SESSION_END_PATH))
    report = lines_of(await run_repair(api_stack))
    assert int(report["sessions deleted to the end"]) >= 1 and "orphans removed" in report
    assert await state() == {"threads": [healthy], "messages": 1, "turns": 0, "grants": 0, "sessions": [healthy]}

    def ended() -> int:
        requests = api_stack.receiver.requests_for(SESSION_END_PATH)[ends_before:]
        return sum(1 for request in requests if half_deleted in request.body.decode())

    # The hooks service delivers the SessionEnd on its own time: wait for it, then make sure it
    # came once (a second one would have been sent along with the first).
    await eventually(ended, until=lambda count: count >= 1, within=30, what="the SessionEnd of the finished deletion")
    assert ended() == 1
    # Nothing old is left to repair.
    again = lines_of(await run_repair(api_stack, "--dry-run"))
    assert again["chat threads without a session"] == again["sessions left half deleted"] == "0"

"""`python -m popagent_agent_runner repair [--dry-run] [--older-than SECONDS]`: reconcile what a crash,
a partial restore or a defect left inconsistent in agent-runner's tables. It runs with the service's
own environment (the same variables as `python -m popagent_agent_runner`), beside a running stack or
not.

1. Sessions whose deletion was left half done are deleted to the end, as the service does when it
   starts (`SessionDeleter.resume_pending`: their `SessionEnd`, their browser tab, their rows, the
   `SessionDeleted` fact; an unreachable hooks service or browser-bridge is logged and skipped).
2. Rows without their session (`state/orphans.py`) are removed.

It prints one line per kind, with a count and the first ids; `--dry-run` prints them and changes nothing.
Rows younger than `--older-than` (default 300 s) are left alone: they may be being created now.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable

from popagent.browser_bridge.v1 import browser_bridge_pb2_grpc
from popagent.hooks.v1 import hooks_pb2_grpc
from popagent_agent_runner.memory.threads import USER_RESOURCE
from popagent_agent_runner.service import QUERIES
from popagent_agent_runner.settings import Settings
from popagent_agent_runner.state.orphans import DEFAULT_OLDER_THAN_S, OrphanRepair
from popagent_agent_runner.state.sessions import SessionDeleter
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore
from popagent_core import db
from popagent_core.grpc_client import open_channel
from popagent_core.service import schema_for
from popagent_core.settings import load_settings
from popagent_hooks_client.client import HooksClient

SHOWN_IDS = 10
# resume_pending finishes at most 100 sessions a call; this many calls at most.
MAX_DELETION_ROUNDS = 100


def _line(kind: str, ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS]) + (f", … ({len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else "")
    return f"{kind}: {len(ids)}" + (f" ({shown})" if ids else "")


async def repair(settings: Settings, *, older_than_s: float, dry_run: bool, say: Callable[[str], None]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        pool = await stack.enter_async_context(
            db.open_pool(
                settings.database_url, schema_for("agent-runner"), max_size=2, application_name="popagent-repair"
            )
        )
        half_deleted = [row["id"] for row in await pool.fetch(QUERIES["sessions_pending_deletion"], older_than_s)]
        orphans = await OrphanRepair(pool).find(older_than_s, chat_resource=USER_RESOURCE)
        say(_line("sessions left half deleted", half_deleted))
        say(_line("chat threads without a session", orphans.threads))
        say(_line("turn records without a session", orphans.turns))
        say(_line("approvals without a session", orphans.approvals))
        say(_line("sessions gone with tool grants left", orphans.grant_sessions))
        if dry_run:
            say("dry run: nothing changed")
            return
        if half_deleted:
            hooks = await stack.enter_async_context(open_channel(settings.hooks_address, settings.internal_token))
            bridge = await stack.enter_async_context(
                open_channel(settings.browser_bridge_address, settings.internal_token)
            )
            deleter = SessionDeleter(
                pool=pool,
                workspaces=AgentWorkspaceStore(pool, settings.workspace_root, QUERIES),
                hooks=HooksClient(hooks_pb2_grpc.HooksServiceStub(hooks)),
                browser=browser_bridge_pb2_grpc.BrowserBridgeServiceStub(bridge),
                q=QUERIES,
            )
            finished = 0
            for _ in range(MAX_DELETION_ROUNDS):
                done = await deleter.resume_pending(older_than_s)
                finished += done
                if not done:
                    break
            say(f"sessions deleted to the end: {finished}")
        await OrphanRepair(pool).remove(orphans)
        say("orphans removed")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m popagent_agent_runner repair", description="reconcile orphaned rows of agent-runner"
    )
    parser.add_argument("--dry-run", action="store_true", help="report what would be repaired, change nothing")
    parser.add_argument(
        "--older-than",
        type=float,
        default=DEFAULT_OLDER_THAN_S,
        metavar="SECONDS",
        help=f"leave younger rows alone (default {DEFAULT_OLDER_THAN_S:g})",
    )
    args = parser.parse_args(argv)
    if args.older_than < 0:
        parser.error("--older-than must be 0 or more seconds")
    settings = load_settings(Settings, "agent-runner")
    asyncio.run(repair(settings, older_than_s=args.older_than, dry_run=args.dry_run, say=print))

"""A running turn is not redirected by a symbolic link swapped into a parent folder of its repository.

Through the gateway on the real chat stack. The workspace is registered as `holder-…/repo`;
between two of the turn's tool calls (while the model is asked for the next step) `holder-…`
is moved away and replaced by a symbolic link to a folder outside the workspace root whose
`repo/data.txt` holds the canary; file tools and a shell command after the swap still see the
original. The attack this stands for: another workspace's shell did
the swap while this turn ran, and `read_file` then returned the gateway's key.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from chat.helpers import chat, of_type
from support.canary import CANARY, assert_no_canary
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

READ = "mastra_workspace_read_file"
LIST = "mastra_workspace_list_files"
GREP = "mastra_workspace_grep"
RUN = "mastra_workspace_execute_command"
ORIGINAL = "original-content-of-the-repository"


async def test_a_parent_folder_swapped_for_a_link_mid_turn_reaches_nothing_outside(
    stack: Stack, tmp_path: Path
) -> None:
    holder = stack.workspace_root / f"holder-{uuid.uuid4().hex[:8]}"
    (holder / "repo").mkdir(parents=True)
    (holder / "repo" / "data.txt").write_text(f"{ORIGINAL}\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "repo").mkdir(parents=True)
    (elsewhere / "repo" / "data.txt").write_text(f"{CANARY}\n")
    (elsewhere / "repo" / "planted.txt").write_text(f"{CANARY}\n")
    swapped = False

    def respond(body: dict[str, Any]) -> Turn:
        nonlocal swapped
        step = sum(1 for message in body["messages"] if message["role"] == "tool")
        if step == 1 and not swapped:
            holder.rename(holder.with_name(f"{holder.name}-moved"))
            holder.symlink_to(elsewhere)
            swapped = True
        script = [
            Turn.call(ToolCall(READ, {"path": "data.txt"}, id="before")),
            Turn.call(
                ToolCall(READ, {"path": "data.txt"}, id="after"),
                ToolCall(LIST, {"path": "."}, id="list"),
                ToolCall(GREP, {"pattern": "canary|original"}, id="grep"),
                ToolCall(RUN, {"command": "cat data.txt; ls"}, id="shell"),
            ),
            Turn.say("Done."),
        ]
        return script[step if step < 2 else 2]

    async with stack.client() as client:
        workspace_id = holder.name
        created = await client.post(
            "/api/workspaces", json={"id": workspace_id, "name": workspace_id, "path": f"{holder.name}/repo"}
        )
        assert created.status_code == 201, created.text
        session = await client.post("/api/sessions", json={"workspaceId": workspace_id})
        assert session.status_code == 201, session.text
        stack.models.responder = respond
        chunks = await chat(client, session.json()["id"], "read data.txt twice")

    assert swapped
    assert_no_canary(repr(chunks), where="the turn's stream")
    assert_no_canary(repr(stack.models.requests), where="what the model was sent")
    outputs = {o["toolCallId"]: o["output"] for o in of_type(chunks, "tool-output-available")}
    errors = {e["toolCallId"]: e["errorText"] for e in of_type(chunks, "tool-output-error")}
    assert errors == {}
    assert ORIGINAL in outputs["before"]["content"]
    # The turn still works on the directory it opened: the original content, not the link's.
    assert ORIGINAL in outputs["after"]["content"]
    assert [entry["path"] for entry in outputs["list"]["entries"]] == ["data.txt"]
    assert outputs["grep"]["matches"] == [f"data.txt:1: {ORIGINAL}"]
    # The sandbox mounts the descriptor the turn holds, not the path.
    assert outputs["shell"]["exitCode"] == 0, outputs["shell"]
    assert outputs["shell"]["output"].split() == [ORIGINAL, "data.txt"]

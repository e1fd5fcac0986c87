"""The stack `make run` starts, broken on purpose while it works (issue 22, RELIABILITY rows 2, 8, 10).

Real processes throughout: the launcher with its supervised children, the scripted model server
as a process of its own (every answer streams for a few seconds), and the clients of a user: chat
streams over HTTP and tasks created through the gateway. What must hold after each fault: the
stack recovers by itself, every accepted prompt is kept, every stream the stack could still
answer ends with a terminal chunk, and every task ends completed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pytest

from popagent_dev.embedded import StoppablePostgres, stoppable_postgres
from support.launcher import Launched, child_pid, health_of, launch, start_model_server
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-work")]

MODEL = "fake/fake-chat"
# About three seconds of streaming per answer: long enough to break it in the middle.
SLOW_TURN = {"text": "steady " * 30, "chunk_size": 14, "chunk_delay_s": 0.2}
TERMINAL_STATUSES = ("completed", "failed", "dead-letter", "cancelled")
# Orphaned task attempts are found within seconds, not the default 20 s.
FAST_RECOVERY = {
    "POPAGENT_TASKS_HEARTBEAT_INTERVAL_S": "0.5",
    "POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S": "3",
    "POPAGENT_TASKS_SWEEP_INTERVAL_S": "1",
    "POPAGENT_TASKS_POLL_INTERVAL_S": "0.2",
    "POPAGENT_TASKS_RETRY_BASE_S": "1",
    "POPAGENT_TASKS_RETRY_CAP_S": "4",
}
# An outage's interrupted attempts count (a task that keeps killing its runner must end): with
# six attempts and the backoff above, a task rides out a restart of 7.5 s or more on a loaded machine.
TASK_ATTEMPTS = 6


@dataclass
class ChatStream:
    """One chat turn read to its end in a thread, as a browser would."""

    stack: Launched
    session: str
    prompt: str
    status: int | None = None
    chunks: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    done: bool = False  # the `[DONE]` line arrived
    broken: str = ""  # the connection failed (what httpx said)
    thread: threading.Thread | None = None

    def start(self) -> ChatStream:
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self) -> None:
        body = {
            "id": self.session,
            "model": MODEL,
            "message": {
                "id": f"u-{uuid.uuid4().hex}",
                "role": "user",
                "parts": [{"type": "text", "text": self.prompt}],
            },
        }
        try:
            with (
                httpx.Client(
                    base_url=self.stack.url, headers={"x-popagent-key": self.stack.api_key}, timeout=60
                ) as client,
                client.stream("POST", "/api/chat", json=body) as response,
            ):
                self.status = response.status_code
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        self.done = True
                    elif line.startswith("data: {"):
                        self.chunks.append(orjson.loads(line.removeprefix("data: ")))
        except httpx.HTTPError as exc:
            self.broken = f"{type(exc).__name__}: {exc}"

    def join(self, timeout_s: float = 60) -> None:
        assert self.thread is not None
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"the chat stream of {self.prompt!r} did not end"

    @property
    def ended(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    @property
    def streaming(self) -> bool:
        return any(chunk["type"] == "text-delta" for chunk in self.chunks)

    @property
    def terminal(self) -> str | None:
        """`finish` or `error` when the stream ended with one (then `[DONE]`), else None."""
        ends = [chunk["type"] for chunk in self.chunks if chunk["type"] in ("finish", "error")]
        return ends[-1] if ends and self.done else None


class User:
    """The API as the UI uses it, against a launched stack."""

    def __init__(self, stack: Launched) -> None:
        self.stack = stack
        self.client = httpx.Client(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=10)

    def new_session(self) -> str:
        created = self.client.post("/api/sessions", json={"title": "fault"})
        assert created.status_code == 201, created.text
        return created.json()["id"]

    def messages(self, session: str) -> list[dict[str, Any]]:
        loaded = self.client.get(f"/api/sessions/{session}")
        assert loaded.status_code == 200, loaded.text
        return loaded.json()["messages"]

    def create_task(self, prompt: str) -> str:
        task = {"prompt": prompt, "workspaceId": "popagent", "model": MODEL, "maxAttempts": TASK_ATTEMPTS}
        created = self.client.post("/api/tasks", json=task)
        assert created.status_code == 201, created.text
        return created.json()["id"]

    def task(self, task_id: str) -> dict[str, Any]:
        return self.client.get(f"/api/tasks/{task_id}").json()

    def wait_task(self, task_id: str, timeout_s: float = 90) -> dict[str, Any]:
        return wait_until(
            lambda: _quietly(lambda: self.task(task_id)),
            until=lambda task: task is not None and task.get("status") in TERMINAL_STATUSES,
            within=timeout_s,
            interval=0.3,
            what=f"task {task_id} to end",
        )

    def healthy(self) -> bool:
        health = _quietly(lambda: health_of(self.stack))
        return bool(health and health.get("ok"))

    def close(self) -> None:
        self.client.close()


def _quietly(call: Any) -> Any:
    """The call's answer, or None while the gateway (restarting) does not answer."""
    try:
        return call()
    except (httpx.HTTPError, ValueError):
        return None


def assert_prompt_kept(user: User, chat: ChatStream) -> dict[str, Any] | None:
    """The session holds the chat's prompt, and after it the answer as the stream left it."""
    messages = user.messages(chat.session)
    prompts = [m for m in messages if m["role"] == "user" and m["parts"] == [{"type": "text", "text": chat.prompt}]]
    assert len(prompts) == 1, (chat.prompt, messages)
    index = messages.index(prompts[0])
    return messages[index + 1] if index + 1 < len(messages) else None


@pytest.fixture
def models(tmp_path: Path) -> Iterator[str]:
    process, url = start_model_server(tmp_path, SLOW_TURN)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


# Each child of `make run`, killed in turn (the gateway last: its kill breaks the stream itself).
VICTIMS = ("agent-runner", "hooks", "tasks", "evolution", "secrets", "browser-bridge", "gateway")


def test_each_service_killed_while_a_chat_streams_and_a_task_runs_the_stack_recovers(
    tmp_path: Path, models: str
) -> None:
    stack = launch(tmp_path, {"NINEROUTER_URL": models, "POPAGENT_AGENT_RUNNER_WORKERS": "1", **FAST_RECOVERY})
    try:
        stack.wait_running()
        user = User(stack)
        for victim in VICTIMS:
            kill_during_work(stack, user, victim)
        # Recovered, not only alive: a new chat streams its whole answer.
        after = ChatStream(stack, user.new_session(), "after every fault").start()
        after.join()
        assert after.terminal == "finish", after.chunks[-3:]
        user.close()
    finally:
        stack.stop()


def kill_during_work(stack: Launched, user: User, victim: str) -> None:
    """SIGKILL `victim` while a chat streams and a task runs; both must end as the stack can make them."""
    chat = ChatStream(stack, user.new_session(), f"keep this prompt ({victim})").start()
    task_id = user.create_task(f"a task while {victim} dies")
    wait_until(lambda: chat.streaming or chat.ended, what=f"the chat to stream before {victim} dies", within=60)
    assert chat.status == 200 and not chat.ended, (victim, chat.status, chat.chunks, chat.broken)
    pid = child_pid(stack, victim)
    psutil.Process(pid).kill()
    wait_until(lambda: child_pid(stack, victim) != pid, what=f"{victim} to be restarted", within=30)
    wait_until(user.healthy, what=f"the stack to be healthy after {victim} was killed", within=60)
    chat.join()
    if victim == "gateway":
        assert chat.broken, "a killed gateway breaks the connection of its stream"
    else:
        # Whatever died behind the gateway, the stream ended with a terminal chunk.
        assert chat.terminal in ("finish", "error"), (victim, chat.chunks[-3:], chat.broken)
    answer = _await_settled_answer(user, chat)
    if chat.terminal == "finish":
        assert answer is not None and "interrupted" not in answer["metadata"], (victim, answer)
    task = user.wait_task(task_id)
    assert task["status"] == "completed", (
        victim,
        {k: task.get(k) for k in ("status", "attemptCount", "lastErrorClass", "lastError")},
    )


def _await_settled_answer(user: User, chat: ChatStream) -> dict[str, Any] | None:
    """The answer once the turn has ended in storage (a killed runner's placeholder stays `interrupted`)."""
    deadline = time.monotonic() + 20
    while True:
        answer = assert_prompt_kept(user, chat)
        settled = answer is not None and (
            "failure" in answer["metadata"] or "interrupted" in answer["metadata"] or answer["parts"]
        )
        if settled or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


@pytest.fixture
def database() -> Iterator[StoppablePostgres]:
    with stoppable_postgres() as server:
        yield server


def test_postgres_stopped_for_15_s_under_load_loses_no_prompt_and_fails_no_task(
    tmp_path: Path, models: str, database: StoppablePostgres
) -> None:
    stack = launch(
        tmp_path,
        {
            "NINEROUTER_URL": models,
            "DATABASE_URL": database.dsn,
            "OBSERVABILITY_DATABASE_URL": database.dsn,
            **FAST_RECOVERY,
        },
    )
    try:
        stack.wait_running()
        user = User(stack)
        sessions = [user.new_session() for _ in range(4)]
        tasks = [user.create_task(f"task {n} across the outage") for n in range(3)]
        chats: list[ChatStream] = []
        stop_load = threading.Event()

        def load(session: str) -> None:
            n = 0
            while not stop_load.is_set():
                chat = ChatStream(stack, session, f"prompt {n} of {session}").start()
                chats.append(chat)
                chat.join(90)
                n += 1
                if chat.status != 200:
                    time.sleep(0.5)  # refused while the database is down: as a user would, try again

        loaders = [threading.Thread(target=load, args=(session,), daemon=True) for session in sessions]
        for loader in loaders:
            loader.start()
        wait_until(lambda: any(chat.streaming for chat in chats), what="the load to stream", within=60)
        database.stop()
        time.sleep(15)
        database.start()
        up_at = time.monotonic()
        # Normal service within 30 s of the database being back: a new chat answers in full.
        while True:
            probe = ChatStream(stack, _quietly(user.new_session) or sessions[0], "after the outage").start()
            probe.join(90)
            if probe.terminal == "finish":
                break
            assert time.monotonic() - up_at < 30, ("no normal service 30 s after the outage", probe.chunks[-3:])
            time.sleep(0.5)
        stop_load.set()
        for loader in loaders:
            loader.join(120)
        # 0 lost prompts: every prompt the stack accepted (its stream began) is in its session.
        accepted = [chat for chat in chats if chat.status == 200 and chat.chunks]
        assert accepted, "no chat was accepted"
        for chat in accepted:
            answer = _await_settled_answer(user, chat)
            if chat.terminal == "finish":
                assert answer is not None and "interrupted" not in answer["metadata"], answer
        # 0 permanently failed tasks.
        assert [user.wait_task(task_id)["status"] for task_id in tasks] == ["completed"] * 3
        user.close()
    finally:
        stack.stop()
        database.start()


def test_a_graceful_stop_ends_every_stream_and_hands_running_tasks_back(tmp_path: Path, models: str) -> None:
    """Row 10: Ctrl-C with 20 streaming turns and 2 running tasks: every stream gets a terminal chunk,
    the launcher exits within the grace period plus 2 s, and the next start completes the tasks."""
    env = {"NINEROUTER_URL": models, **FAST_RECOVERY}
    stack = launch(tmp_path, env)
    try:
        stack.wait_running()
        user = User(stack)
        tasks = [user.create_task(f"task {n} across the stop") for n in range(2)]
        wait_until(lambda: all(user.task(t)["status"] == "running" for t in tasks), what="both tasks to run", within=60)
        chats = [ChatStream(stack, user.new_session(), f"stream {n}").start() for n in range(20)]
        wait_until(lambda: all(chat.streaming for chat in chats), what="all 20 chats to stream", within=90)
        user.close()
        stopping = time.monotonic()
        os.killpg(stack.process.pid, signal.SIGINT)
        assert stack.process.wait(60) == 0
        # The launcher's own stop bound (10 s for its children) plus 2 s.
        assert time.monotonic() - stopping < 12, time.monotonic() - stopping
        for chat in chats:
            chat.join(10)
            assert chat.terminal in ("finish", "error"), (chat.prompt, chat.chunks[-3:], chat.broken)
        again = launch(tmp_path, env)
        try:
            again.wait_running()
            user = User(again)
            assert [user.wait_task(task_id)["status"] for task_id in tasks] == ["completed", "completed"]
            for chat in chats:
                _await_settled_answer(user, chat)
            user.close()
        finally:
            again.stop()
    finally:
        stack.stop()

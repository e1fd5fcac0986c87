"""`make run` gives each process only what it needs (issue 31, item 4).

One launcher, started as a user starts it, with credentials of the user's own in its environment:
every child's `/proc/<pid>/environ` holds only the secret-bearing variables the table
(popagent_core.topology.SECRET_VARIABLES) gives its service; NATS refuses a client without a
user, and a service's user cannot leave its subjects; a chat turn's event still reaches the
consumer that learns from it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError

from popagent_core import subjects
from popagent_core.subjects import inbox_prefix
from popagent_core.topology import CALLERS, CREDENTIAL_NAME, SECRET_VARIABLES, SERVICE_NAMES
from popagent_dev.embedded import NATS_CONSUMERS
from popagent_dev.launcher import NATS_PASSWORDS
from support.launcher import Launched, launch, start_model_server
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("stack-e2e")]

# Credentials of the user's own, in the launcher's environment: each must reach only the services
# the table lists for it, or (a name the table does not know) none.
MODEL_KEY = "sk-isolation-model-key-" + "m" * 16
PREVIOUS_SECRET_KEY = base64.b64encode(b"p" * 32).decode()
STRAY_TOKEN = "ghp_isolationStrayToken0123456789abcdef"
USER_SETTINGS = {
    "NINEROUTER_API_KEY": MODEL_KEY,
    "POPAGENT_SECRET_PREVIOUS_KEYS": PREVIOUS_SECRET_KEY,
    "GITHUB_TOKEN": STRAY_TOKEN,
    # A non-secret setting of the user's: it reaches every service.
    "POPAGENT_LOG_LEVEL": "INFO",
}
# The name the probes below connect with: their deliberate violations are told apart in nats.log.
PROBE = "isolation-probe"


def environ_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return {name: value for name, _, value in (entry.partition("=") for entry in entries if entry)}


def service_of(child: str) -> str:
    """`agent-runner-2` -> `agent-runner`: the service a launcher child runs."""
    for name in sorted(SERVICE_NAMES, key=len, reverse=True):
        if child == name or child.startswith(f"{name}-"):
            return name
    raise AssertionError(f"unknown child {child}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    base = tmp_path_factory.mktemp("isolation")
    models, models_url = start_model_server(base)
    launched = launch(base, {**USER_SETTINGS, "NINEROUTER_URL": models_url})
    try:
        launched.wait_running()
        yield launched
    finally:
        launched.stop()
        models.terminate()
        models.wait(10)


def children(stack: Launched) -> dict[str, dict[str, str]]:
    """Every service child's environment, by child name."""
    state = json.loads((stack.data_dir / "supervisor.json").read_text())["children"]
    assert {service_of(name) for name in state} == set(SERVICE_NAMES)
    return {name: environ_of(child["pid"]) for name, child in state.items()}


def nats_address(stack: Launched) -> str:
    url = urlsplit(next(iter(children(stack).values()))["NATS_URL"])
    return f"{url.hostname}:{url.port}"


def password_of(stack: Launched, service: str) -> str:
    return json.loads((stack.data_dir / NATS_PASSWORDS).read_text())[service]


def test_each_child_holds_only_the_credentials_its_service_is_given(stack: Launched) -> None:
    environments = children(stack)
    secret_key = (stack.data_dir / "secret-key").read_text().strip()
    tokens = {service_of(name): env["POPAGENT_INTERNAL_TOKEN"] for name, env in environments.items()}
    for child, env in environments.items():
        service = service_of(child)
        held = {name for name in SECRET_VARIABLES if service in SECRET_VARIABLES[name]}
        # Exactly the table's share: each listed variable the stack sets is there, no other one is.
        carried = {name for name in env if name in SECRET_VARIABLES or CREDENTIAL_NAME.search(name)}
        expected = held - {"POPAGENT_HOOKS"}  # the stack runs no hook handlers: nothing to pass
        assert carried == expected, (child, sorted(carried ^ expected))
        # Its own token and NATS user, and the callers it answers; nothing of another service's.
        assert env["POPAGENT_INTERNAL_TOKEN"] == tokens[service]
        assert env["POPAGENT_INTERNAL_TOKEN"].startswith(f"{service}.")
        assert urlsplit(env["NATS_URL"]).username == service
        if "POPAGENT_INTERNAL_CALLERS" in env:
            assert set(json.loads(env["POPAGENT_INTERNAL_CALLERS"])) == CALLERS[service], child
        everything = "\0".join(env.values())
        for other, token in tokens.items():
            assert (token in everything) == (other == service), (child, other)
        assert (secret_key in everything) == (service == "secrets"), child
        assert (stack.api_key in everything) == (service == "gateway"), child
        assert (MODEL_KEY in everything) == (service in {"gateway", "agent-runner", "evolution"}), child
        assert (PREVIOUS_SECRET_KEY in everything) == (service == "secrets"), child
        assert STRAY_TOKEN not in everything, child
        assert env["POPAGENT_LOG_LEVEL"] == "INFO", child
    # The explicit cases of the issue, so the loop above cannot pass by having checked nothing.
    runner = environments["agent-runner-1" if "agent-runner-1" in environments else "agent-runner"]
    assert "POPAGENT_SECRET_KEY" not in runner and "POPAGENT_API_KEY" not in runner
    assert environments["secrets"]["POPAGENT_SECRET_KEY"] == secret_key
    assert environments["gateway"]["POPAGENT_API_KEY"] == stack.api_key
    assert "POPAGENT_INTERNAL_CALLERS" not in environments["gateway"]
    # agent-runner for the bearer tokens of users' MCP servers only (the secrets service limits it).
    secrets_callers = {"gateway", "browser-bridge", "agent-runner"}
    assert set(json.loads(environments["secrets"]["POPAGENT_INTERNAL_CALLERS"])) == secrets_callers


def test_the_infrastructure_the_launcher_starts_inherits_no_credential(stack: Launched) -> None:
    """PostgreSQL and NATS are the launcher's children too: the user's credentials stay with it."""
    started = [
        process
        for process in stack.descendants()
        if any(program in " ".join(process.cmdline()) for program in ("nats-server", "postgres"))
    ]
    assert any("nats-server" in " ".join(process.cmdline()) for process in started)
    for process in started:
        everything = "\0".join(environ_of(process.pid).values())
        for value in (MODEL_KEY, PREVIOUS_SECRET_KEY, STRAY_TOKEN, stack.api_key):
            assert value not in everything, process.cmdline()


async def _connect(address: str, user: str | None = None, password: str = "", **options: Any) -> NatsClient:
    credentials = f"{user}:{password}@" if user else ""
    return await nats.connect(
        f"nats://{credentials}{address}",
        name=PROBE,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        connect_timeout=5,
        **options,
    )


def test_nats_refuses_a_client_without_credentials_or_with_wrong_ones(stack: Launched) -> None:
    address = nats_address(stack)

    async def attempt(user: str | None, password: str) -> str:
        try:
            client = await _connect(address, user, password)
        except NatsError as exc:
            return str(exc)
        await client.close()
        return "connected"

    assert "Authorization Violation" in asyncio.run(attempt(None, ""))
    assert "Authorization Violation" in asyncio.run(attempt("secrets", password_of(stack, "agent-runner")))
    # The right password is let in (the refusals above are about the credentials, not the server).
    assert asyncio.run(attempt("agent-runner", password_of(stack, "agent-runner"))) == "connected"


def test_a_service_user_cannot_leave_its_subjects(stack: Launched) -> None:
    address = nats_address(stack)

    async def probe() -> tuple[list[str], list[bytes]]:
        violations: list[str] = []
        all_refused = asyncio.Event()

        async def error(exc: Exception) -> None:
            violations.append(str(exc))
            if len(violations) == 4:
                all_refused.set()

        runner = await _connect(
            address,
            "agent-runner",
            password_of(stack, "agent-runner"),
            inbox_prefix=inbox_prefix("agent-runner"),
            error_cb=error,
        )
        evolution = await _connect(
            address, "evolution", password_of(stack, "evolution"), inbox_prefix=inbox_prefix("evolution")
        )
        received: list[bytes] = []
        try:
            # What it is allowed: hear learning changes (published by evolution), publish its own facts.
            heard = asyncio.Event()

            async def on_learning(msg: Any) -> None:
                received.append(msg.data)
                heard.set()

            await runner.subscribe(subjects.LEARNING_CHANGED, cb=on_learning)
            await runner.flush()
            await evolution.publish(subjects.LEARNING_CHANGED, b"allowed")
            await asyncio.wait_for(heard.wait(), 10)
            # What it is not: another service's facts and replies, another service's stream.
            await runner.subscribe("popagent.secrets.>")
            await runner.subscribe(f"{inbox_prefix('evolution')}.>")
            await runner.publish(subjects.SECRET_CHANGED, b"forged")
            await runner.publish(f"$JS.API.STREAM.DELETE.{subjects.stream_name('secrets')}", b"")
            await runner.flush()

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_refused.wait(), 10)
        finally:
            await runner.close()
            await evolution.close()
        return violations, received

    violations, received = asyncio.run(probe())
    assert received == [b"allowed"]
    assert sorted(violations) == sorted(
        violation.lower()
        for violation in [
            'nats: permissions violation for subscription to "popagent.secrets.>"',
            f'nats: permissions violation for subscription to "{inbox_prefix("evolution")}.>"',
            f'nats: permissions violation for publish to "{subjects.SECRET_CHANGED}"',
            f'nats: permissions violation for publish to "$JS.API.STREAM.DELETE.{subjects.stream_name("secrets")}"',
        ]
    )


def test_a_chat_turns_events_reach_their_consumers(stack: Launched) -> None:
    """A turn's outcome goes agent-runner -> JetStream -> evolution, and its session's deletion
    agent-runner -> JetStream -> hooks, each as its own NATS user; a thumbs down is taken by the
    stream from the gateway, as its own."""
    with httpx.Client(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=60) as client:
        created = client.post("/api/sessions", json={"title": "isolation"})
        assert created.status_code == 201, created.text
        body = {
            "id": created.json()["id"],
            "model": "fake/fake-chat",
            "message": {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": "Hello"}]},
        }
        with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            lines = list(response.iter_lines())
        assert "data: [DONE]" in lines, lines[-5:]
        start = next(
            chunk
            for chunk in (json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {"))
            if chunk.get("type") == "start"
        )
        feedback = {
            "sessionId": body["id"],
            "turnId": start["messageMetadata"]["turnId"],
            "traceId": start["messageMetadata"]["traceId"],
            "rating": "down",
        }
        # 201 only once JetStream acknowledged the gateway's event (503 otherwise).
        given = client.post("/api/observability/feedback", json=feedback)
        assert given.status_code == 201, given.text
        deleted = client.delete(f"/api/sessions/{body['id']}")
        assert deleted.status_code in (200, 204), deleted.text
    address = nats_address(stack)

    async def acknowledged(service: str) -> int:
        """How many events the service's consumer has acknowledged, asked as the service."""
        ((subject, durable),) = NATS_CONSUMERS[service]
        client = await _connect(address, service, password_of(stack, service), inbox_prefix=inbox_prefix(service))
        try:
            info = await client.jetstream(timeout=5).consumer_info(
                subjects.stream_name(subjects.owner_of(subject)), durable
            )
            # Counted in delivered messages: a filtered consumer may skip other subjects' sequence numbers.
            return info.ack_floor.consumer_seq if info.ack_floor else 0
        finally:
            await client.close()

    for service in ("evolution", "hooks"):
        wait_until(
            lambda: asyncio.run(acknowledged(service)),  # noqa: B023 - called within the iteration
            until=lambda seq: seq >= 1,
            within=60,
            what=f"{service}'s consumer to acknowledge its event",
        )
    # Nothing any service did in the stack's life was refused (the probes above are told apart).
    log = (stack.data_dir / "logs" / "nats.log").read_text(errors="replace")
    refused = [line for line in log.splitlines() if "Violation" in line and PROBE not in line]
    assert refused == [], refused
    # No service said its NATS password (its NATS_URL) in a log line.
    passwords = json.loads((stack.data_dir / NATS_PASSWORDS).read_text()).values()
    for path in (stack.data_dir / "logs").glob("*.log"):
        text = path.read_text(errors="replace")
        assert not [password for password in passwords if password in text], path.name

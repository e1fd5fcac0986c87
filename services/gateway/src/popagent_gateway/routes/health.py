"""GET /api/health: deployment readiness of both PostgreSQL stores, NATS and every service."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from popagent.agent_runner.v1 import agent_runner_pb2, agent_runner_pb2_grpc
from popagent_core.grpc_client import check_health
from popagent_gateway.deps import cached_stub
from popagent_gateway.dto.health import ComponentHealthOut, HealthOut

router = APIRouter()


async def _postgres(dsn: str) -> ComponentHealthOut:
    try:
        conn = await asyncio.wait_for(asyncpg.connect(dsn), timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        return ComponentHealthOut(ok=False, detail=type(exc).__name__)
    try:
        await conn.fetchval("SELECT 1")
    except asyncpg.PostgresError as exc:
        return ComponentHealthOut(ok=False, detail=type(exc).__name__)
    finally:
        await conn.close()
    return ComponentHealthOut(ok=True)


async def _service(request: Request, name: str) -> ComponentHealthOut:
    if name == "agent-runner":
        # Every runner turns go to must serve: the announced ones, else the configured workers.
        runners = request.app.state.runners.serving()
        serving = await asyncio.gather(*(check_health(channel, timeout_s=1.0) for _, channel in runners))
        down = [address for (address, _), healthy in zip(runners, serving, strict=True) if not healthy]
        if down:
            return ComponentHealthOut(ok=False, detail=f"not serving: {', '.join(down)}")
        return ComponentHealthOut(ok=True, detail=f"turns go to: {', '.join(address for address, _ in runners)}")
    healthy = await check_health(request.app.state.channels[name], timeout_s=1.0)
    return ComponentHealthOut(ok=healthy, detail="" if healthy else "not serving")


async def _nats(urls: str) -> ComponentHealthOut:
    """NATS answers when a server of `NATS_URL` sends its INFO line on connect."""
    failures: list[str] = []
    for url in urls.split(","):
        parts = urlsplit(url.strip())
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(parts.hostname or "127.0.0.1", parts.port or 4222), timeout=1
            )
        except (OSError, TimeoutError) as exc:
            failures.append(f"{parts.hostname}:{parts.port}: {type(exc).__name__}")
            continue
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=1)
        except (OSError, TimeoutError) as exc:
            line, failures = b"", [*failures, f"{parts.hostname}:{parts.port}: {type(exc).__name__}"]
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if line.startswith(b"INFO"):
            return ComponentHealthOut(ok=True)
    return ComponentHealthOut(ok=False, detail="; ".join(failures) or "no INFO from NATS")


def _supervisor(state_file: Path) -> ComponentHealthOut:
    """The launcher's children (`make run`): which are restarting or left stopped after a crash loop."""
    try:
        children: dict[str, dict[str, object]] = json.loads(state_file.read_text())["children"]
    except (OSError, ValueError, KeyError):
        return ComponentHealthOut(ok=False, detail="the launcher's state is unreadable")
    troubled = {
        state: sorted(name for name, child in children.items() if child.get("state") == state)
        for state in ("restarting", "failed")
    }
    detail = "; ".join(f"{state}: {', '.join(names)}" for state, names in troubled.items() if names)
    return ComponentHealthOut(ok=not detail, detail=detail)


async def _sandbox(request: Request) -> ComponentHealthOut:
    """Whether agent-runner's workspace shell can build its bubblewrap sandbox."""
    stub = cached_stub(request, "agent-runner", agent_runner_pb2_grpc.AgentRunnerStateServiceStub)
    try:
        status = await stub.GetSandboxStatus(agent_runner_pb2.GetSandboxStatusRequest(), timeout=5)
    except asyncio.CancelledError:
        raise
    except Exception:
        return ComponentHealthOut(ok=False, detail="sandbox status unknown: agent-runner did not answer")
    if not status.available:
        return ComponentHealthOut(ok=False, detail=status.reason)
    return ComponentHealthOut(ok=True, detail=f"commands run with {status.limits}" if status.limits else "")


@router.get("/health", response_model=HealthOut, responses={503: {"model": HealthOut}})
async def health(request: Request) -> JSONResponse:
    """Readiness of application and observability PostgreSQL, NATS and every service (and,
    under `make run`, of the launcher's children: which one it is restarting).

    Model, search and browser outages are deliberately not part of readiness, and neither is
    the workspace shell's sandbox: `sandbox` says whether commands can run ("sandbox
    unavailable: <reason>" when not), while chat and the file tools work without it, and
    when they can, what bounds each (processes, memory, the workspace's disk budget) and how.
    """
    settings = request.app.state.settings
    names = list(request.app.state.channels)
    results = await asyncio.gather(
        _postgres(settings.database_url),
        _postgres(settings.observability_database_url),
        *(_service(request, name) for name in names),
    )
    components = {"postgres": results[0], "observabilityPostgres": results[1]}
    if settings.nats_url:
        components["nats"] = await _nats(settings.nats_url)
    components.update({f"service:{name}": result for name, result in zip(names, results[2:], strict=True)})
    if settings.supervisor_state is not None:
        components["supervisor"] = _supervisor(settings.supervisor_state)
    ok = all(component.ok for component in components.values())
    components["sandbox"] = await _sandbox(request)
    body = HealthOut(ok=ok, components=components)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

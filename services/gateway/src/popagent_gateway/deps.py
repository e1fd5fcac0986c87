"""Request dependencies: API-key auth and the gRPC stubs of the owning services.

Every dependency is `async def`, though none awaits: FastAPI runs a plain `def` dependency in a
worker thread, a thread hop per dependency per request that cost more than the rest of the gateway's
work on a chat turn (py-spy under bench/chat.py)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import grpc
from fastapi import Depends, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import APIKeyHeader
from pydantic import BaseModel

from popagent.agent_runner.v1 import (
    agent_runner_pb2_grpc,
    attachments_pb2_grpc,
    channels_pb2_grpc,
    mcp_servers_pb2_grpc,
    skills_pb2_grpc,
)
from popagent.browser_bridge.v1 import browser_bridge_pb2_grpc
from popagent.evolution.v1 import evolution_pb2_grpc, learning_pb2_grpc
from popagent.hooks.v1 import hooks_pb2_grpc
from popagent.secrets.v1 import secrets_pb2_grpc
from popagent.tasks.v1 import tasks_pb2_grpc
from popagent_core.errors import Unauthenticated
from popagent_gateway.catalog import ModelCatalog
from popagent_gateway.runners import RunnerDirectory
from popagent_gateway.settings import Settings

API_KEY_HEADER = "x-popagent-key"
# Declares the key in the OpenAPI document (securitySchemes) so clients and API fuzzers know
# every /api route needs it; the check itself stays in require_api_key.
_API_KEY_SCHEME = APIKeyHeader(name=API_KEY_HEADER, scheme_name="popagentKey", auto_error=False)


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


UNAUTHENTICATED_MESSAGE = "missing or wrong x-popagent-key"


def api_key_matches(expected: str, supplied: str) -> bool:
    """No key configured admits everyone; otherwise an exact, constant-time match."""
    # Constant time: the comparison must not tell how much of the key was right.
    return not expected or hmac.compare_digest(supplied.encode(), expected.encode())


async def require_api_key(request: Request, _declared: Annotated[str | None, Security(_API_KEY_SCHEME)] = None) -> None:
    """Every /api route depends on this (a route-inventory test checks it)."""
    if not api_key_matches(request.app.state.settings.api_key, request.headers.get(API_KEY_HEADER, "")):
        raise Unauthenticated(UNAUTHENTICATED_MESSAGE)


def _query_names(dependant: Any) -> set[str] | None:
    """The query parameters a route declares (None: a query model checks its own, refusing extras)."""
    names: set[str] = set()
    for param in dependant.query_params:
        annotation = getattr(param.field_info, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return None
        names.add(param.alias)
    for sub in dependant.dependencies:
        inner = _query_names(sub)
        if inner is None:
            return None
        names |= inner
    return names


_QUERY_NAMES: dict[int, set[str] | None] = {}


async def refuse_unknown_query(request: Request) -> None:
    """Every /api route refuses query parameters it does not declare (422 naming the first), as the
    routes with a query model already did: a misspelt filter must not silently list everything."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    key = id(route)
    if key not in _QUERY_NAMES:
        _QUERY_NAMES[key] = _query_names(dependant)
    allowed = _QUERY_NAMES[key]
    if allowed is None:
        return
    for name in request.query_params:
        if name not in allowed:
            raise RequestValidationError(
                [{"loc": ("query", name), "msg": "unknown query parameter", "type": "extra_forbidden", "input": name}]
            )


def channel(request: Request, service: str) -> grpc.aio.Channel:
    return request.app.state.channels[service]


StubT = TypeVar("StubT")
ResultT = TypeVar("ResultT")


def cached_stub(request: Request, service: str, stub_class: Callable[[grpc.aio.Channel], StubT]) -> StubT:
    """One stub per (class, channel) for the app's lifetime: building a stub creates a
    callable per RPC, which per request would cost more than the call's own overhead."""
    return _stub_for(request, channel(request, service), stub_class)


def _stub_for(request: Request, target: grpc.aio.Channel, stub_class: Callable[[grpc.aio.Channel], StubT]) -> StubT:
    stubs: dict[tuple[object, grpc.aio.Channel], Any] = request.app.state.__dict__.setdefault("stubs", {})
    stub = stubs.get((stub_class, target))
    if stub is None:
        stub = stubs[(stub_class, target)] = stub_class(target)
    return stub


async def get_agent_runner(request: Request) -> agent_runner_pb2_grpc.AgentRunnerServiceStub:
    return cached_stub(request, "agent-runner", agent_runner_pb2_grpc.AgentRunnerServiceStub)


# A call that finds nothing at the session's preferred agent-runner (killed moments ago, stopping)
# goes to the next one, at most this many.
MAX_RUNNERS_TRIED = 3


async def on_session_runner(
    request: Request,
    session_id: str,
    stub_class: Callable[[grpc.aio.Channel], StubT],
    call: Callable[[StubT], Awaitable[ResultT]],
) -> ResultT:
    """`call` with a stub of the session's agent-runner. Where nothing answers (UNAVAILABLE before any
    answer: nothing listens, or the runner is stopping and takes nothing new) the next runner is tried."""
    runners = runner_candidates(request, session_id, stub_class)[:MAX_RUNNERS_TRIED]
    for tried, (address, stub) in enumerate(runners, start=1):
        try:
            return await call(stub)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE or tried == len(runners):
                raise
            request.app.state.runners.pass_over(address)
    raise AssertionError("no agent-runner to call")  # never empty: the configured workers at least


def runner_candidates(
    request: Request, session_id: str, stub_class: Callable[[grpc.aio.Channel], StubT]
) -> list[tuple[str, StubT]]:
    """Every agent-runner a session's creation and turns may go to, as (address, stub), most preferred
    first: the first while the runners stay the same, so its parsed history of the session stays
    current (`RunnerDirectory`)."""
    runners: RunnerDirectory = request.app.state.runners
    return [(address, _stub_for(request, channel, stub_class)) for address, channel in runners.candidates(session_id)]


async def get_agent_runner_state(request: Request) -> agent_runner_pb2_grpc.AgentRunnerStateServiceStub:
    return cached_stub(request, "agent-runner", agent_runner_pb2_grpc.AgentRunnerStateServiceStub)


async def get_agent_runner_tasks(request: Request) -> agent_runner_pb2_grpc.AgentRunnerTaskServiceStub:
    return cached_stub(request, "agent-runner", agent_runner_pb2_grpc.AgentRunnerTaskServiceStub)


async def get_agent_runner_skills(request: Request) -> skills_pb2_grpc.AgentRunnerSkillsServiceStub:
    return cached_stub(request, "agent-runner", skills_pb2_grpc.AgentRunnerSkillsServiceStub)


async def get_agent_runner_channels(request: Request) -> channels_pb2_grpc.AgentRunnerChannelsServiceStub:
    return cached_stub(request, "agent-runner", channels_pb2_grpc.AgentRunnerChannelsServiceStub)


async def get_agent_runner_mcp(request: Request) -> mcp_servers_pb2_grpc.AgentRunnerMcpServiceStub:
    return cached_stub(request, "agent-runner", mcp_servers_pb2_grpc.AgentRunnerMcpServiceStub)


async def get_agent_runner_attachments(request: Request) -> attachments_pb2_grpc.AttachmentsServiceStub:
    return cached_stub(request, "agent-runner", attachments_pb2_grpc.AttachmentsServiceStub)


async def get_model_catalog(request: Request) -> ModelCatalog:
    """The app's one model catalog cache, made on first use from the settings."""
    state = request.app.state
    catalog: ModelCatalog | None = getattr(state, "model_catalog", None)
    if catalog is None:
        settings: Settings = state.settings
        catalog = state.model_catalog = ModelCatalog(
            settings.ninerouter_url, api_key=settings.ninerouter_api_key, ttl_s=settings.model_catalog_ttl_s
        )
    return catalog


async def get_hooks(request: Request) -> hooks_pb2_grpc.HooksServiceStub:
    return cached_stub(request, "hooks", hooks_pb2_grpc.HooksServiceStub)


async def get_secrets(request: Request) -> secrets_pb2_grpc.SecretsServiceStub:
    return cached_stub(request, "secrets", secrets_pb2_grpc.SecretsServiceStub)


async def get_tasks(request: Request) -> tasks_pb2_grpc.TasksServiceStub:
    return cached_stub(request, "tasks", tasks_pb2_grpc.TasksServiceStub)


async def get_evolution(request: Request) -> evolution_pb2_grpc.EvolutionServiceStub:
    return cached_stub(request, "evolution", evolution_pb2_grpc.EvolutionServiceStub)


async def get_evolution_learning(request: Request) -> learning_pb2_grpc.EvolutionLearningServiceStub:
    return cached_stub(request, "evolution", learning_pb2_grpc.EvolutionLearningServiceStub)


async def get_browser_bridge(request: Request) -> browser_bridge_pb2_grpc.BrowserBridgeServiceStub:
    return cached_stub(request, "browser-bridge", browser_bridge_pb2_grpc.BrowserBridgeServiceStub)


SettingsDep = Annotated[Settings, Depends(get_settings)]
AgentRunnerStub = Annotated[agent_runner_pb2_grpc.AgentRunnerServiceStub, Depends(get_agent_runner)]
AgentRunnerStateStub = Annotated[agent_runner_pb2_grpc.AgentRunnerStateServiceStub, Depends(get_agent_runner_state)]
AgentRunnerTaskStub = Annotated[agent_runner_pb2_grpc.AgentRunnerTaskServiceStub, Depends(get_agent_runner_tasks)]
AgentRunnerChannelsStub = Annotated[
    channels_pb2_grpc.AgentRunnerChannelsServiceStub, Depends(get_agent_runner_channels)
]
AgentRunnerMcpStub = Annotated[mcp_servers_pb2_grpc.AgentRunnerMcpServiceStub, Depends(get_agent_runner_mcp)]
AgentRunnerSkillsStub = Annotated[skills_pb2_grpc.AgentRunnerSkillsServiceStub, Depends(get_agent_runner_skills)]
AgentRunnerAttachmentsStub = Annotated[
    attachments_pb2_grpc.AttachmentsServiceStub, Depends(get_agent_runner_attachments)
]
ModelCatalogDep = Annotated[ModelCatalog, Depends(get_model_catalog)]
HooksStub = Annotated[hooks_pb2_grpc.HooksServiceStub, Depends(get_hooks)]
SecretsStub = Annotated[secrets_pb2_grpc.SecretsServiceStub, Depends(get_secrets)]
TasksStub = Annotated[tasks_pb2_grpc.TasksServiceStub, Depends(get_tasks)]
EvolutionStub = Annotated[evolution_pb2_grpc.EvolutionServiceStub, Depends(get_evolution)]
EvolutionLearningStub = Annotated[learning_pb2_grpc.EvolutionLearningServiceStub, Depends(get_evolution_learning)]
BrowserBridgeStub = Annotated[browser_bridge_pb2_grpc.BrowserBridgeServiceStub, Depends(get_browser_bridge)]

"""The gRPC kernel: health, caller authentication, error mapping and request ids, over real sockets."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest

from popagent.evolution.v1 import evolution_pb2, evolution_pb2_grpc
from popagent_core import errors
from popagent_core.auth import CallerRegistry, caller_var
from popagent_core.credentials import generate_credentials
from popagent_core.grpc_client import check_health, map_rpc_errors, open_channel
from popagent_core.grpc_server import create_server, running
from popagent_core.log import JsonFormatter, request_id_var
from popagent_dev.embedded import free_port
from popagent_evolution.service import MIGRATIONS, build
from popagent_evolution.settings import Settings


@dataclass
class Evolution:
    address: str
    dsn: str
    tokens: dict[str, str]

    async def get_settings(self, token: str, **kwargs: object) -> evolution_pb2.AutonomySettings:
        async with open_channel(self.address, token) as channel:
            stub = evolution_pb2_grpc.EvolutionServiceStub(channel)
            return await stub.GetAutonomySettings(evolution_pb2.GetAutonomySettingsRequest(), timeout=5, **kwargs)

    async def execute(self, sql: str) -> None:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": "evolution"})
        try:
            await conn.execute(sql)
        finally:
            await conn.close()


@pytest.fixture
async def evolution(make_database, nats_url, internal_credentials) -> AsyncIterator[Evolution]:
    """The real evolution service, in this process, on a fresh migrated database."""
    tokens, callers = internal_credentials
    dsn = await make_database({"evolution": MIGRATIONS})
    address = f"127.0.0.1:{free_port()}"
    env = {
        "DATABASE_URL": dsn,
        "NATS_URL": nats_url,
        "POPAGENT_EVOLUTION_ADDR": address,
        "POPAGENT_INTERNAL_CALLERS": callers,
    }
    settings = Settings(**env)
    async with build(settings):
        yield Evolution(address, dsn, tokens)


class JsonLines(logging.Handler):
    """The service's own log format, captured: what an operator would read."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter("evolution"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def json_log() -> Iterator[JsonLines]:
    handler = JsonLines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


async def test_health_reports_serving_without_credentials(evolution):
    async with open_channel(evolution.address, token="") as channel:
        serving = await check_health(channel, timeout_s=5)

    assert serving is True


async def test_a_valid_caller_reads_the_seeded_autonomy_settings(evolution):
    conn = await asyncpg.connect(evolution.dsn, server_settings={"search_path": "evolution"})
    try:
        row = await conn.fetchrow("SELECT * FROM popagent_autonomy_settings WHERE id = 1")
    finally:
        await conn.close()

    reply = await evolution.get_settings(evolution.tokens["gateway"])

    assert row is not None
    assert reply.evolution_enabled is row["evolution_enabled"] is False
    assert reply.skill_creation_enabled is row["skill_creation_enabled"] is False
    assert reply.self_update_enabled is row["self_update_enabled"] is False
    assert reply.self_update_cron == row["self_update_cron"] == "0 3 * * *"
    assert reply.updated_at == row["updated_at"].isoformat()


async def test_the_reply_follows_the_row_not_code_defaults(evolution):
    await evolution.execute(
        "UPDATE popagent_autonomy_settings SET evolution_enabled = true, self_update_cron = '*/5 * * * *'"
    )

    reply = await evolution.get_settings(evolution.tokens["tasks"])

    assert reply.evolution_enabled is True
    assert reply.self_update_cron == "*/5 * * * *"


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="missing"),
        pytest.param("nocallerdot", id="malformed"),
        pytest.param(f"stranger.{uuid.uuid4().hex}", id="unknown-caller"),
        pytest.param("gateway", id="bare-caller-name"),
    ],
)
async def test_a_call_without_a_valid_credential_is_unauthenticated(evolution, token):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await evolution.get_settings(token)

    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_forged_token_for_a_known_caller_name_is_unauthenticated(evolution):
    # Same caller name, same shape, not the credential the server knows the digest of.
    forged_tokens, _ = generate_credentials()
    assert forged_tokens["gateway"].startswith("gateway.")

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await evolution.get_settings(forged_tokens["gateway"])

    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # The legitimate holder of that name still gets in.
    assert (await evolution.get_settings(evolution.tokens["gateway"])).self_update_cron


@pytest.mark.parametrize(
    ("breakage", "code", "details"),
    [
        (
            "DELETE FROM popagent_autonomy_settings",
            grpc.StatusCode.FAILED_PRECONDITION,
            "autonomy settings row is missing",
        ),
        ("DROP TABLE popagent_autonomy_settings", grpc.StatusCode.UNAVAILABLE, "database error: UndefinedTableError"),
    ],
    ids=["a missing singleton row is failed precondition", "a database failure is unavailable and names no sql"],
)
async def test_a_storage_failure_is_its_status_with_a_message(evolution, breakage, code, details):
    await evolution.execute(breakage)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await evolution.get_settings(evolution.tokens["gateway"])

    assert caught.value.code() == code
    assert caught.value.details() == details


async def test_a_database_failure_logs_the_drivers_reason_with_the_request_id(evolution, json_log):
    await evolution.execute("DROP TABLE popagent_autonomy_settings")
    request_id = f"req-{uuid.uuid4().hex}"

    with pytest.raises(grpc.aio.AioRpcError):
        await evolution.get_settings(evolution.tokens["gateway"], metadata=(("x-request-id", request_id),))

    [entry] = [line for line in json_log.lines if request_id in line]
    assert '"msg":"rpc storage error"' in entry
    assert '"level":"warning"' in entry
    assert 'UndefinedTableError: relation \\"popagent_autonomy_settings\\" does not exist' in entry


async def test_an_unexpected_error_is_internal_logged_with_the_request_id_and_not_leaked(evolution, json_log):
    # A column of the wrong type makes the servicer itself fail (str has no isoformat).
    await evolution.execute("ALTER TABLE popagent_autonomy_settings ALTER COLUMN updated_at TYPE text")
    request_id = f"req-{uuid.uuid4().hex}"

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await evolution.get_settings(evolution.tokens["gateway"], metadata=(("x-request-id", request_id),))

    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error"
    entries = [line for line in json_log.lines if request_id in line]
    assert len(entries) == 1, json_log.lines
    assert '"msg":"rpc failed unexpectedly"' in entries[0]
    assert f'"request_id":"{request_id}"' in entries[0]
    assert "AttributeError" in entries[0]


async def test_the_client_channel_forwards_the_current_request_id(evolution, json_log):
    await evolution.execute("ALTER TABLE popagent_autonomy_settings ALTER COLUMN updated_at TYPE text")
    request_id = f"req-{uuid.uuid4().hex}"

    reset = request_id_var.set(request_id)
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await evolution.get_settings(evolution.tokens["gateway"])
    finally:
        request_id_var.reset(reset)

    assert any(f'"request_id":"{request_id}"' in line for line in json_log.lines), json_log.lines


async def test_a_method_the_servicer_does_not_implement_is_unimplemented(evolution):
    async with open_channel(evolution.address, evolution.tokens["gateway"]) as channel:
        stub = evolution_pb2_grpc.EvolutionServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListSignals(evolution_pb2.ListSignalsRequest(limit=1), timeout=5)

    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_map_rpc_errors_turns_statuses_from_the_real_service_into_popagent_errors(evolution):
    with pytest.raises(errors.Unauthenticated) as unauthenticated, map_rpc_errors():
        await evolution.get_settings("")
    await evolution.execute("DELETE FROM popagent_autonomy_settings")
    with pytest.raises(errors.FailedPrecondition, match="autonomy settings row is missing") as failed, map_rpc_errors():
        await evolution.get_settings(evolution.tokens["gateway"])

    assert isinstance(unauthenticated.value.__cause__, grpc.aio.AioRpcError)
    assert isinstance(failed.value.__cause__, grpc.aio.AioRpcError)


# A bare server with the kernel interceptor and generic handlers: every error class
# raised by a servicer must come back to a `map_rpc_errors` caller as the same class.

RAISABLE = {
    cls.__name__: cls
    for cls in (
        errors.InvalidArgument,
        errors.NotFound,
        errors.AlreadyExists,
        errors.Conflict,
        errors.FailedPrecondition,
        errors.Unauthenticated,
        errors.PermissionDenied,
        errors.ResourceExhausted,
        errors.Unavailable,
        errors.DeadlineExceeded,
        errors.StorageError,
        errors.ConfigurationError,
        errors.PopagentError,
    )
}


async def _raise(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    name = request.decode()
    if name == "whoami":
        return (caller_var.get() or "").encode()
    if name == "boom":
        raise KeyError("secret detail")
    raise RAISABLE[name](f"{name} happened")


async def _stream_then_raise(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield b"first"
    if request == b"ok":
        yield (caller_var.get() or "").encode()
        return
    if request == b"boom":
        raise KeyError("secret detail")
    raise RAISABLE[request.decode()]("mid-stream")


# Set by a client- or bidi-streaming handler if it ever runs: the interceptor must refuse those kinds first.
STREAMING_HANDLERS_RAN: list[str] = []


async def _upload(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
    STREAMING_HANDLERS_RAN.append(f"Upload as {caller_var.get()}")
    return b"".join([request async for request in requests])


async def _chat(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    STREAMING_HANDLERS_RAN.append(f"Chat as {caller_var.get()}")
    async for request in requests:
        yield request


@pytest.fixture
async def bare_server() -> AsyncIterator[tuple[str, dict[str, str]]]:
    tokens, callers = generate_credentials(("gateway", "browser-bridge"))
    server, health = create_server(CallerRegistry.from_json(callers))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.Kernel",
                {
                    "Raise": grpc.unary_unary_rpc_method_handler(_raise),
                    "Stream": grpc.unary_stream_rpc_method_handler(_stream_then_raise),
                    "Upload": grpc.stream_unary_rpc_method_handler(_upload),
                    "Chat": grpc.stream_stream_rpc_method_handler(_chat),
                },
            ),
        )
    )
    async with running(server, health, "127.0.0.1:0") as port:
        yield f"127.0.0.1:{port}", tokens


@pytest.mark.parametrize("name", sorted(RAISABLE))
async def test_every_error_class_round_trips_through_the_interceptor_and_map_rpc_errors(bare_server, name):
    address, tokens = bare_server
    raised = RAISABLE[name]
    expected = errors.ERROR_BY_GRPC_CODE.get(raised.grpc_code, errors.PopagentError)

    async with open_channel(address, tokens["gateway"]) as channel:
        with pytest.raises(errors.PopagentError) as caught, map_rpc_errors():
            await channel.unary_unary("/test.Kernel/Raise")(name.encode(), timeout=5)

    assert type(caught.value) is expected
    assert caught.value.message == f"{name} happened"
    assert caught.value.__cause__.code() == raised.grpc_code  # type: ignore[union-attr]


async def test_the_server_knows_which_caller_is_calling(bare_server):
    address, tokens = bare_server
    seen = []
    for caller in ("gateway", "browser-bridge"):
        async with open_channel(address, tokens[caller]) as channel:
            seen.append(await channel.unary_unary("/test.Kernel/Raise")(b"whoami", timeout=5))

    assert seen == [b"gateway", b"browser-bridge"]


async def test_an_unexpected_exception_becomes_internal_without_its_details(bare_server):
    address, tokens = bare_server
    async with open_channel(address, tokens["gateway"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary("/test.Kernel/Raise")(b"boom", timeout=5)

    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "internal error"


@pytest.mark.parametrize(
    ("request_body", "code", "details"),
    [
        (b"NotFound", grpc.StatusCode.NOT_FOUND, "mid-stream"),
        (b"boom", grpc.StatusCode.INTERNAL, "internal error"),
    ],
)
async def test_a_server_stream_that_fails_midway_delivers_what_it_sent_then_the_mapped_status(
    bare_server, request_body, code, details
):
    address, tokens = bare_server
    received = []
    # A plain channel with explicit metadata keeps this about the server side only.
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_stream("/test.Kernel/Stream")(
            request_body, timeout=5, metadata=(("authorization", f"Bearer {tokens['gateway']}"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for message in call:
                received.append(message)

    assert received == [b"first"]
    assert caught.value.code() == code
    assert caught.value.details() == details


async def test_a_server_streaming_call_through_open_channel_carries_the_callers_credential(bare_server):
    # Turn events flow runner -> gateway as a server stream: open_channel must authenticate those too.
    address, tokens = bare_server
    async with open_channel(address, tokens["browser-bridge"]) as channel:
        call = channel.unary_stream("/test.Kernel/Stream")(b"ok", timeout=5)
        received = [message async for message in call]

    assert received == [b"first", b"browser-bridge"]


async def test_a_stream_rejects_a_caller_without_credentials(bare_server):
    address, _ = bare_server
    async with open_channel(address, token="") as channel:
        call = channel.unary_stream("/test.Kernel/Stream")(b"NotFound", timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pytest.fail("an unauthenticated stream must not yield")

    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _no_requests() -> AsyncIterator[bytes]:
    """An empty request stream. A client still writing a message when the server refuses gets gRPC
    core's own INTERNAL for the failed write instead of the server's status; the handlers record
    their start before reading, so an empty stream still shows whether they ran."""
    return
    yield b"never"


@pytest.mark.parametrize("credential", ["gateway", "none"])
async def test_client_and_bidi_streaming_rpcs_are_refused_before_their_handler_runs(bare_server, credential):
    """The interceptor wraps unary requests only: other kinds would run with no caller check, so none runs."""
    address, tokens = bare_server
    STREAMING_HANDLERS_RAN.clear()
    async with open_channel(address, tokens.get(credential, "")) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as upload:
            await channel.stream_unary("/test.Kernel/Upload")(_no_requests(), timeout=5)
        chat = channel.stream_stream("/test.Kernel/Chat")(_no_requests(), timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as bidi:
            async for _ in chat:
                pytest.fail("a refused bidi stream must not answer")

    assert upload.value.code() == bidi.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert upload.value.details() == (
        "/test.Kernel/Upload is client-streaming, which popagent's gRPC kernel does not serve (unary requests only)"
    )
    assert bidi.value.details() == (
        "/test.Kernel/Chat is bidi-streaming, which popagent's gRPC kernel does not serve (unary requests only)"
    )
    assert STREAMING_HANDLERS_RAN == []
    # The unary kinds on the same server still answer.
    if credential == "gateway":
        async with open_channel(address, tokens["gateway"]) as channel:
            assert await channel.unary_unary("/test.Kernel/Raise")(b"whoami", timeout=5) == b"gateway"


def test_map_rpc_errors_leaves_cancellation_alone():
    cancelled = grpc.aio.AioRpcError(
        grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata(), "client went away"
    )

    with pytest.raises(grpc.aio.AioRpcError) as caught, map_rpc_errors():
        raise cancelled

    assert caught.value is cancelled


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.NotFound),
        (grpc.StatusCode.OUT_OF_RANGE, errors.InvalidArgument),
        (grpc.StatusCode.ABORTED, errors.Conflict),
        (grpc.StatusCode.UNIMPLEMENTED, errors.PopagentError),
        (grpc.StatusCode.UNKNOWN, errors.PopagentError),
    ],
)
def test_map_rpc_errors_maps_a_status_to_its_error_class(code, expected):
    with pytest.raises(errors.PopagentError) as caught, map_rpc_errors():
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "details here")

    assert type(caught.value) is expected
    assert caught.value.message == "details here"

"""Wiring of the browser-bridge service."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg

from popagent.browser_bridge.v1 import browser_bridge_pb2_grpc, navigator_pb2_grpc
from popagent.events.v1 import events_pb2
from popagent.secrets.v1 import secrets_pb2_grpc
from popagent_browser_bridge.bifrost import BifrostClient
from popagent_browser_bridge.navigator import BrowserGate, Navigator
from popagent_browser_bridge.profiles import Browsers
from popagent_browser_bridge.repo import BrowserSettingsRepo, ProfileRepo, RecordingRepo, TabOwnerRepo, TakeoverRepo
from popagent_browser_bridge.scrub import SecretValues
from popagent_browser_bridge.servicer import BrowserBridgeServicer, BrowserNavigatorServicer
from popagent_browser_bridge.settings import Settings
from popagent_core import bus, subjects
from popagent_core.grpc_client import open_channel
from popagent_core.lifecycle import background_task
from popagent_core.service import service_kernel

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
PROFILE_CONNECT_WAIT_S = 15.0
SESSION_DELETED_DURABLE = "browser-bridge-session-deleted"


async def _on_session_deleted(browsers: Browsers, msg: Msg) -> None:
    """A deleted session's tabs, recording and profile choice go. agent-runner asks for that at
    once over gRPC; the durable event is what reaches a browser-bridge that was down then."""
    try:
        event = events_pb2.SessionDeleted.FromString(msg.data)
    except DecodeError:
        # Redelivery cannot fix a payload that does not parse: log it and let it be acked.
        logger.warning("undecodable session-deleted event dropped", extra={"subject": msg.subject})
        return
    if event.session_id:
        await browsers.close_session(event.session_id, deleted=True)


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[Navigator]:
    async with service_kernel("browser-bridge", settings, MIGRATIONS) as kernel, contextlib.AsyncExitStack() as stack:
        secrets_channel = await stack.enter_async_context(
            open_channel(settings.secrets_address, settings.internal_token)
        )
        secrets = SecretValues(secrets_pb2_grpc.SecretsServiceStub(secrets_channel))

        # Any committed change of a secret (stored, rotated, bound, deleted): reload before the next result.
        async def changed(_msg: object) -> None:
            secrets.changed()

        subscription = await kernel.nats.subscribe(subjects.SECRET_CHANGED, cb=changed)
        stack.push_async_callback(subscription.unsubscribe)
        repo = BrowserSettingsRepo(kernel.pool)
        nats = kernel.nats

        async def settings_changed() -> None:
            # Flushed before the PATCH is answered: the server has passed it on to every runner by then.
            try:
                await nats.publish(subjects.BROWSER_SETTINGS_CHANGED, b"")
                await nats.flush(timeout=1)
            except Exception as exc:
                # The runners' copies expire on their own within a minute.
                logger.warning("browser settings change not announced", extra={"error": str(exc)})

        def new_client(connect_wait_s: float = settings.browser_connect_wait_s) -> BifrostClient:
            return BifrostClient(
                settings.browser_socket,
                settings.browser_mcp_url,
                call_timeout_s=settings.browser_call_timeout_s,
                connect_wait_s=connect_wait_s,
            )

        client = new_client()
        gate = BrowserGate()
        gate.apply(await repo.get())
        recordings = RecordingRepo(
            kernel.pool,
            max_frames=settings.browser_recording_max_frames,
            max_bytes=settings.browser_recording_max_bytes,
        )
        navigator = Navigator(
            client,
            secrets,
            gate,
            takeover_store=TakeoverRepo(kernel.pool),
            tab_store=TabOwnerRepo(kernel.pool),
            recordings=recordings,
        )
        await navigator.load_takeovers()
        client.on_new_session = _forget_tabs(navigator)
        await stack.enter_async_context(background_task(client.run, name="browser-bridge-bifrost"))
        browsers = Browsers(
            navigator,
            ProfileRepo(kernel.pool),
            recordings,
            settings.browser_profiles_dir,
            # A profile's MCP session opens on its session's first call: that call waits for it.
            lambda: new_client(max(settings.browser_connect_wait_s, PROFILE_CONNECT_WAIT_S)),
        )
        await browsers.load()
        stack.push_async_callback(browsers.close)
        consumer = functools.partial(
            bus.consume,
            kernel.js,
            subject=subjects.SESSION_DELETED,
            durable=SESSION_DELETED_DURABLE,
            handler=functools.partial(_on_session_deleted, browsers),
        )
        await stack.enter_async_context(background_task(consumer, name="browser-bridge-session-deleted"))
        browser_bridge_pb2_grpc.add_BrowserBridgeServiceServicer_to_server(
            BrowserBridgeServicer(repo, browsers, settings_changed), kernel.server
        )
        navigator_pb2_grpc.add_BrowserNavigatorServiceServicer_to_server(
            BrowserNavigatorServicer(browsers), kernel.server
        )
        async with kernel.serving(settings.grpc_address):
            yield navigator


def _forget_tabs(navigator: Navigator):  # type: ignore[no-untyped-def]
    async def forget() -> None:
        navigator.reset_tabs()

    return forget

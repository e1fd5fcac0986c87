"""/api/channels: native channel connections (docs/channels.md), their history, posts and cancels, and
each connection's webhook, `POST /api/channels/{id}/events`, which the platform signs instead of
sending the API key: the raw body and headers go to agent-runner, which checks the platform's
signature before anything parses the body."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from popagent.agent_runner.v1 import channels_pb2 as pb
from popagent_gateway.deps import AgentRunnerChannelsStub
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.channels import (
    CHANNEL_ID_PATTERN,
    ChannelCreate,
    ChannelHistoryEntryOut,
    ChannelHistoryOut,
    ChannelListOut,
    ChannelOut,
    ChannelPatch,
    ChannelPost,
    ChannelPostOut,
    ChannelTurnCancelOut,
)
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/channels", tags=["channels"])
# Signed by the platform, not keyed: included without the API key dependency (and passed by the key
# middleware, `bounded.platform_signed`).
webhooks = APIRouter(prefix="/api/channels", tags=["channels"])

ChannelId = Annotated[str, Path(min_length=36, max_length=36, pattern=CHANNEL_ID_PATTERN)]
TurnId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f-]+$")]
# Platforms' deliveries are small (Slack's and Discord's are a few KiB); more is refused.
MAX_EVENT_BYTES = 1024 * 1024
CREDENTIAL_NAMES = {
    "bot_token": "botToken",
    "signing_secret": "signingSecret",
    "secret_token": "secretToken",
    "public_key": "publicKey",
}


def _fields(body: ChannelCreate | ChannelPatch) -> pb.ChannelFields:
    fields = pb.ChannelFields()
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None:
            continue
        if name in ("allowed_users", "approvers"):
            getattr(fields, name).values.extend(value)
            getattr(fields, name).SetInParent()
        elif name == "credentials":
            for field_name in value.model_fields_set:
                if (given := getattr(value, field_name)) is not None:
                    fields.credentials[CREDENTIAL_NAMES[field_name]] = given
            fields.credentials_given = True
        else:
            setattr(fields, name, value)
    return fields


def _out(channel: pb.Channel) -> ChannelOut:
    values = {name: getattr(channel, name) for name in ChannelOut.model_fields}
    return ChannelOut.model_validate(
        {**values, "allowed_users": list(channel.allowed_users), "approvers": list(channel.approvers)}
    )


@router.get("", response_model=ChannelListOut)
async def list_channels(stub: AgentRunnerChannelsStub) -> ChannelListOut:
    """Every connection, by name (never its credentials)."""
    response = await stub.ListChannels(pb.ListChannelsRequest())
    return ChannelListOut(channels=[_out(channel) for channel in response.channels])


@router.post("", response_model=ChannelOut, status_code=201)
async def create_channel(body: ChannelCreate, stub: AgentRunnerChannelsStub) -> ChannelOut:
    """Add a connection; its webhook is POST /api/channels/{id}/events. A name in use is 409."""
    return _out(await stub.CreateChannel(pb.CreateChannelRequest(fields=_fields(body))))


@router.get("/{channel_id}", response_model=ChannelOut)
async def get_channel(channel_id: ChannelId, stub: AgentRunnerChannelsStub) -> ChannelOut:
    return _out(await stub.GetChannel(pb.GetChannelRequest(id=channel_id)))


@router.patch("/{channel_id}", response_model=ChannelOut)
async def update_channel(channel_id: ChannelId, body: ChannelPatch, stub: AgentRunnerChannelsStub) -> ChannelOut:
    """Change the fields sent; `credentials` replaces all of them."""
    return _out(await stub.UpdateChannel(pb.UpdateChannelRequest(id=channel_id, fields=_fields(body))))


@router.delete("/{channel_id}", status_code=204, response_class=Response)
async def delete_channel(channel_id: ChannelId, stub: AgentRunnerChannelsStub) -> Response:
    """Delete the connection, its mapping, history and stored credentials; its sessions stay."""
    await stub.DeleteChannel(pb.DeleteChannelRequest(id=channel_id))
    return Response(status_code=204)


@router.get("/{channel_id}/history", response_model=ChannelHistoryOut)
async def channel_history(
    channel_id: ChannelId,
    stub: AgentRunnerChannelsStub,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ChannelHistoryOut:
    """The connection's recent traffic and errors, newest first."""
    response = await stub.ChannelHistory(pb.ChannelHistoryRequest(id=channel_id, limit=limit))
    return ChannelHistoryOut(entries=[from_message(ChannelHistoryEntryOut, entry) for entry in response.entries])


@router.post("/{channel_id}/post", response_model=ChannelPostOut)
async def post_to_channel(channel_id: ChannelId, body: ChannelPost, stub: AgentRunnerChannelsStub) -> ChannelPostOut:
    """Post a message as the bot; beyond the platform's size limit it is split, never cut."""
    request = pb.PostToChannelRequest(
        id=channel_id, conversation=body.conversation, thread=body.thread or "", text=body.text
    )
    return ChannelPostOut(message_ids=list((await stub.PostToChannel(request)).message_ids))


@router.post("/{channel_id}/turns/{turn_id}/cancel", response_model=ChannelTurnCancelOut)
async def cancel_channel_turn(
    channel_id: ChannelId, turn_id: TurnId, stub: AgentRunnerChannelsStub
) -> ChannelTurnCancelOut:
    """Stop a turn a message to this connection started (404: not one of its turns; 409: it ended)."""
    response = await stub.CancelChannelTurn(pb.CancelChannelTurnRequest(id=channel_id, turn_id=turn_id))
    return ChannelTurnCancelOut(turn_id=response.turn_id, status=response.status)


@webhooks.post(
    "/{channel_id}/events",
    responses={401: {"model": ErrorOut, "description": "the platform's signature is missing, forged or stale"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object", "description": "the platform's delivery"}}},
        }
    },
)
async def channel_event(channel_id: ChannelId, request: Request, stub: AgentRunnerChannelsStub) -> Response:
    """The connection's webhook: a platform's delivery, signed by the platform (Slack's signing secret,
    Telegram's secret token header, Discord's Ed25519), never the API key. Checked on the raw body
    before it is parsed; 401 for a missing, forged or stale signature."""
    body = await request.body()
    if len(body) > MAX_EVENT_BYTES:
        return Response(
            status_code=413, content=b'{"error":"the delivery is too large"}', media_type="application/json"
        )
    headers = [pb.ChannelHeader(name=name, value=value) for name, value in request.headers.items()]
    answer = await stub.ChannelEvent(pb.ChannelEventRequest(id=channel_id, body=body, headers=headers))
    return Response(status_code=answer.status, content=answer.body, media_type=answer.content_type or None)

"""AgentRunnerChannelsService: channel connections and deliveries; proto <-> ChannelStore / ChannelHub."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import channels_pb2 as pb
from popagent.agent_runner.v1 import channels_pb2_grpc
from popagent_agent_runner.channels.hub import ChannelHub
from popagent_agent_runner.channels.store import ConnectionChanges, ConnectionRecord, HistoryEntry
from popagent_agent_runner.servicers.messages import message_of

MAX_HISTORY = 500


def channel_message(connection: ConnectionRecord) -> pb.Channel:
    return message_of(
        pb.Channel, connection, allowed_users=list(connection.allowed_users), approvers=list(connection.approvers)
    )


def _changes(fields: pb.ChannelFields) -> ConnectionChanges:
    def optional(name: str) -> object:
        return getattr(fields, name) if fields.HasField(name) else None

    return ConnectionChanges(
        name=optional("name"),  # type: ignore[arg-type]
        platform=optional("platform"),  # type: ignore[arg-type]
        workspace_id=optional("workspace_id"),  # type: ignore[arg-type]
        allowed_users=list(fields.allowed_users.values) if fields.HasField("allowed_users") else None,
        approvers=list(fields.approvers.values) if fields.HasField("approvers") else None,
        bot_user_id=optional("bot_user_id"),  # type: ignore[arg-type]
        api_base_url=optional("api_base_url"),  # type: ignore[arg-type]
        credentials=dict(fields.credentials) if fields.credentials_given else None,
        enabled=optional("enabled"),  # type: ignore[arg-type]
    )


def _entry(entry: HistoryEntry) -> pb.ChannelHistoryEntry:
    return message_of(pb.ChannelHistoryEntry, entry)


class ChannelsServicer(channels_pb2_grpc.AgentRunnerChannelsServiceServicer):
    def __init__(self, hub: ChannelHub) -> None:
        self.hub = hub
        self.store = hub.store

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListChannelsResponse:
        return pb.ListChannelsResponse(channels=[channel_message(c) for c in await self.store.list()])

    async def GetChannel(self, request: pb.GetChannelRequest, context: grpc.aio.ServicerContext) -> pb.Channel:
        return channel_message(await self.store.get(request.id))

    async def CreateChannel(self, request: pb.CreateChannelRequest, context: grpc.aio.ServicerContext) -> pb.Channel:
        return channel_message(await self.store.create(_changes(request.fields)))

    async def UpdateChannel(self, request: pb.UpdateChannelRequest, context: grpc.aio.ServicerContext) -> pb.Channel:
        return channel_message(await self.store.update(request.id, _changes(request.fields)))

    async def DeleteChannel(
        self, request: pb.DeleteChannelRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteChannelResponse:
        await self.store.delete(request.id)
        return pb.DeleteChannelResponse()

    async def ChannelHistory(
        self, request: pb.ChannelHistoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.ChannelHistoryResponse:
        limit = min(max(request.limit or 100, 1), MAX_HISTORY)
        return pb.ChannelHistoryResponse(entries=[_entry(e) for e in await self.store.history(request.id, limit)])

    async def ChannelEvent(
        self, request: pb.ChannelEventRequest, context: grpc.aio.ServicerContext
    ) -> pb.ChannelEventResponse:
        headers = {header.name.lower(): header.value for header in request.headers}
        answer = await self.hub.event(request.id, headers, request.body)
        return pb.ChannelEventResponse(status=answer.status, body=answer.body, content_type=answer.content_type)

    async def PostToChannel(
        self, request: pb.PostToChannelRequest, context: grpc.aio.ServicerContext
    ) -> pb.PostToChannelResponse:
        posted = await self.hub.post(request.id, request.conversation, request.thread, request.text)
        return pb.PostToChannelResponse(message_ids=posted.message_ids)

    async def CancelChannelTurn(
        self, request: pb.CancelChannelTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelTurnResponseForChannel:
        status = await self.hub.cancel(request.id, request.turn_id)
        return pb.CancelTurnResponseForChannel(turn_id=request.turn_id, status=status)

    async def PostApprovalCard(
        self, request: pb.PostApprovalCardRequest, context: grpc.aio.ServicerContext
    ) -> pb.PostApprovalCardResponse:
        message_id = await self.hub.post_approval_card(
            request.id, request.conversation, request.thread, request.approval_id
        )
        return pb.PostApprovalCardResponse(message_id=message_id)

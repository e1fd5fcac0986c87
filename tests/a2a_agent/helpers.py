"""What the A2A agent tests share: the official a2a-sdk client on the stack's agent, at a chosen
protocol version, and the pieces of what it answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import AgentCard, Role, SendMessageRequest, StreamResponse, Task
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0

from support.stacks import API_KEY, MODEL, Stack

VERSIONS = [PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3]
BEARER = {"authorization": f"Bearer {API_KEY}"}


async def fetched_card(stack: Stack) -> AgentCard:
    """The card as a client reads it: without any key."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=30.0) as http:
        return await A2ACardResolver(http, stack.url).get_agent_card()


@contextlib.asynccontextmanager
async def connected(
    stack: Stack, version: str, headers: dict[str, str], *, streaming: bool = True
) -> AsyncIterator[Client]:
    """A client of the stack's agent speaking `version` (the card offers both: the others are left out
    of the card the client is made from, as a client of one version sees it), sending `headers`."""
    card = await fetched_card(stack)
    offered = [interface for interface in card.supported_interfaces if interface.protocol_version == version]
    assert offered, f"the card offers no {version} interface"
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(offered)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, read=60.0)) as http:
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        yield client
        await client.close()


def message_to(text: str, *, context_id: str = "", model: str = MODEL) -> SendMessageRequest:
    request = SendMessageRequest(message=new_text_message(text, context_id=context_id or None, role=Role.ROLE_USER))
    if model:
        request.metadata.update({"model": model})
    return request


async def sent(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def the_task(responses: list[StreamResponse]) -> Task:
    """A non-streaming send's answer: the task."""
    [response] = responses
    assert response.HasField("task"), response
    return response.task


def answer_of(task: Task) -> str:
    [artifact] = task.artifacts
    return get_artifact_text(artifact)


def status_text(task: Task) -> str:
    return "".join(part.text for part in task.status.message.parts)

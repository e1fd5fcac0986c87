"""A session's observational memory, as its memory view shows it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from popagent_gateway.dto import WireModel


class ObservationEntryOut(WireModel):
    kind: Literal["observation", "reflection"] = Field(
        description="observation (the Observer's) or reflection (the Reflector's condensed log)"
    )
    content: str = Field(description="dated, prioritized observations, as the model receives them")
    tokens: int
    message_tokens: int = Field(description="tokens of the original messages it stands for")
    active: bool = Field(description="false: buffered in the background, not yet in the context")
    created_at: str


class SessionMemoryOut(WireModel):
    generation: int = Field(description="the log's version; each reflection starts a new one (older ones stay stored)")
    entries: list[ObservationEntryOut]
    last_compaction_at: str | None = Field(description="when an observation or reflection last changed the log")
    observed_message_tokens: int = Field(description="tokens of the original messages the log stands for")
    observation_tokens: int = Field(description="tokens of the log itself")
    tokens_saved: int = Field(
        description="observedMessageTokens minus observationTokens: what each request no longer sends"
    )
    raw_messages: int = Field(description="messages still sent as they are, after the log")
    raw_tokens: int

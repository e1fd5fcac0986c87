"""`LeanOpenAIModel`: a pydantic-ai `Model` for any OpenAI-compatible `/v1/chat/completions` server.

Built on one shared keep-alive `httpx.AsyncClient` and orjson; the openai SDK is never imported. It
sends the request pydantic-ai's `OpenAIChatModel` would send through an `OpenAICompatibleProvider`
of the same name and assembles the same `ModelResponse` (the agreement tests in
`tests/agent_runner_model/` check both against one scripted server), with these differences, each
on purpose:

- Streaming hands text to the turn's `TurnSink` at once and pydantic-ai coalesced deltas (see
  `llm.stream`), which is what makes streaming cheap. With a sink set, `request()` streams too
  (text to the sink, the finished response to pydantic-ai), so a turn's agents run unstreamed.
- Tool schemas go through the profile's JSON-schema transformer once per distinct schema, not on
  every request.
- When a stream reports usage more than once (9Router puts an estimate on the finish chunk before
  the real figures), the last report wins; `OpenAIChatModel` adds them up. An estimate that no real
  report followed keeps its `estimated` detail (`response.is_estimated`). A turn streams every
  request (`streaming_to(DROP_TEXT)` where nobody reads the text): 9Router's non-streamed answers
  overstate `prompt_tokens` by 2000.
- A stream that ends before `[DONE]` and before any finish reason raises `ModelConnectionError`;
  `OpenAIChatModel` lets the raw transport error through or accepts the truncated answer.
- There are no automatic retries unless asked for (`max_retries`): the turn decides, and reports
  the failure (`classify_model_error`) when it gives up.
- The `qwen3.5-4b` route gets its leading string system messages merged into one (docs/configuration.md,
  "Pointing it at a model gateway"); other models get the messages unchanged.
- Settings only `OpenAIChatModel`'s Responses-era features use (raw annotations, unmapped response
  data, continuous usage stats, cached instructions, prompt cache breakpoints) raise `UserError`.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import httpx
import orjson
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic_ai import RunContext, UnexpectedModelBehavior
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import ModelMessage, ModelResponse, PartStartEvent, TextPart
from pydantic_ai.models import ModelRequestParameters, StreamedResponse, check_allow_model_requests
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettings

from popagent_agent_runner.llm.catalog import ModelCatalog
from popagent_agent_runner.llm.prices import ModelPrice, ModelPrices, turn_cost
from popagent_agent_runner.llm.profile import compatible_model_profile
from popagent_agent_runner.llm.request import ChatRequestEncoding
from popagent_agent_runner.llm.response import decode_completion, is_estimated
from popagent_agent_runner.llm.stream import (
    DROP_TEXT,
    LeanStreamedResponse,
    TurnSink,
    current_turn_sink,
    streaming_to,
)
from popagent_agent_runner.llm.wire import (
    DONE,
    PACE_READS,
    ModelFailure,
    SSEDecoder,
    classify_model_error,
    status_error,
    stream_error,
    transport_error,
)
from popagent_core.telemetry import TRACER

__all__ = [
    "DROP_TEXT",
    "LeanModels",
    "LeanOpenAIModel",
    "ModelFailure",
    "TurnSink",
    "classify_model_error",
    "compatible_model_profile",
    "current_turn_sink",
    "is_estimated",
    "streaming_to",
]

DEFAULT_TIMEOUT: Any = httpx.Timeout(600.0, connect=5.0)
"""pydantic-ai's default: long enough for a slow local model's first token, short to connect."""
DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
RETRYABLE_STATUSES = frozenset({408, 409, 429})
MERGE_SYSTEM_MESSAGES_FOR: tuple[str, ...] = ("qwen3.5-4b",)
"""Routes whose chat template takes one leading system message (matched on the model id after any `provider/`)."""


@dataclass(init=False)
class LeanOpenAIModel(ChatRequestEncoding):
    """A pydantic-ai model for an OpenAI-compatible Chat Completions server (9Router, vLLM, llama.cpp, ...).

    Pass the same instance to every agent: it holds one keep-alive connection pool. The turn's text
    goes to the `TurnSink` set with `streaming_to(sink)` around the agent run.
    """

    _model_name: str = field(repr=False)
    _base_url: str = field(repr=False)
    _provider_name: str = field(repr=False)

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str,
        api_key: str | None = None,
        provider_name: str = "ninerouter",
        http_client: httpx.AsyncClient | None = None,
        profile: ModelProfile | Callable[[str], ModelProfile | None] | None = None,
        settings: ModelSettings | None = None,
        coalesce_window: float = 0.02,
        max_retries: int = 0,
        merge_system_messages_for: Iterable[str] = MERGE_SYSTEM_MESSAGES_FOR,
        prices: ModelPrices | None = None,
    ) -> None:
        """Create a model.

        Args:
            model_name: The model id the server knows, provider prefix included (`fake/fake-chat`); sent unchanged.
            base_url: The server's OpenAI base URL, ending in `/v1` (`NINEROUTER_URL`).
            api_key: Sent as `Authorization: Bearer <api_key>` (`NINEROUTER_API_KEY`); none when `None`.
            provider_name: The service's name in message history and telemetry, as `OpenAICompatibleProvider`'s `name`.
            http_client: A client to share; by default the model opens its own (close it with `aclose`).
            profile: Merged over the default profile, or a function replacing it, as a provider's `profile=`.
            settings: Default model settings.
            coalesce_window: Seconds of streamed text merged into one pydantic-ai event (the sink gets every delta).
            max_retries: Retries of a request that failed before its response began (connection errors,
                408/409/429/5xx), honouring `Retry-After`; the `max_retries` model setting overrides it.
            merge_system_messages_for: Model ids (after any `provider/` prefix) whose leading string system
                messages are merged into one.
            prices: The catalog's prices, for each call's cost; none: calls are not priced.
        """
        self._model_name = model_name
        self._base_url = base_url.rstrip("/") + "/"
        self._provider_name = provider_name
        self._provider_profile = profile
        self._chat_url = self._base_url + "chat/completions"
        self._own_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._coalesce_window = coalesce_window
        self._max_retries = max_retries
        self._merge_system_messages = model_name.rsplit("/", 1)[-1] in set(merge_system_messages_for)
        self._prices = prices
        # The provider-level `profile=` is applied in `_provider_model_profile`, so the model-level one stays unset.
        super().__init__(settings=settings, profile=None)

    async def aclose(self) -> None:
        """Close the HTTP client if the model opened it."""
        if self._own_client:
            await self._client.aclose()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return self._provider_name

    @property
    def base_url(self) -> str:
        return self._base_url

    # -- requests ---------------------------------------------------------------------------------------------

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        check_allow_model_requests()
        sink = current_turn_sink()
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        # One span per model call (OpenTelemetry GenAI conventions), none per streamed chunk.
        with TRACER.start_as_current_span(
            "model.generation",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self._provider_name,
                "gen_ai.request.model": self._model_name,
                "gen_ai.request.stream": sink is not None,
                **generation_attributes.get(),
            },
            record_exception=False,
        ) as span:
            started = time.perf_counter()
            try:
                if sink is not None:
                    response = await self._request_through(
                        sink, messages, model_settings, model_request_parameters, span, started
                    )
                else:
                    response = await self._request_unstreamed(messages, model_settings, model_request_parameters)
            except Exception as error:
                # The type only: a provider's message may quote the prompt back.
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.set_attribute("error.type", type(error).__name__)
                raise
            price = self._prices.price(self._model_name) if self._prices is not None else None
            record_generation(span, response, price)
            return response

    async def _request_unstreamed(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        request = await self._build_request(messages, False, model_settings or {}, model_request_parameters)
        response = await self._send(request, stream=False, settings=model_settings or {})
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError as error:
            raise ModelAPIError(
                model_name=self._model_name, message=f"Failed to decode response as JSON: {error}"
            ) from error
        return decode_completion(
            data,
            profile=self.profile,
            model_name=self._model_name,
            provider_name=self._provider_name,
            provider_url=self._base_url,
            canonical_system=self._canonical_system_stamp,
        )

    async def _request_through(
        self,
        sink: TurnSink,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        params: ModelRequestParameters,
        span: Span,
        started: float,
    ) -> ModelResponse:
        """A request streamed from the server with its text handed to `sink` as it arrives, answered to
        pydantic-ai as one finished response (what `request_stream` would have assembled).

        A turn's agents run unstreamed for pydantic-ai (`turn.agent_runs`), which spares its per-event
        stream machinery, while the user still sees every token at once. pydantic-ai is handed nothing
        until the response is complete, so its deltas are merged whole (an unbounded window).
        """
        request = await self._build_request(messages, True, model_settings or {}, params)
        response = await self._send(request, stream=True, settings=model_settings or {})
        try:
            stream = await self._open_stream(response, params, sink, window=math.inf)
            # Once the first text went to the sink, take the stream no more often than the sink forwards
            # it (reasoning before it is read as it comes: the answer's first token must not wait), and
            # its end at once: the turn's last text and its finish wait for it.
            interval: float = getattr(sink, "forward_interval_s", 0.0)
            pace = response.extensions.get(PACE_READS) if interval else None
            first_event = True
            async for event in stream:
                if first_event:
                    first_event = False
                    span.set_attribute("gen_ai.response.time_to_first_chunk", time.perf_counter() - started)
                if pace is not None and isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    pace(interval, DONE)
                    pace = None
            return stream.get()
        finally:
            await response.aclose()

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        check_allow_model_requests()
        sink = current_turn_sink()
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        request = await self._build_request(messages, True, model_settings or {}, model_request_parameters)
        response = await self._send(request, stream=True, settings=model_settings or {})
        try:
            yield await self._open_stream(response, model_request_parameters, sink)
        finally:
            await response.aclose()

    async def _open_stream(
        self,
        response: httpx.Response,
        params: ModelRequestParameters,
        sink: TurnSink | None,
        window: float | None = None,
    ) -> LeanStreamedResponse:
        # Read up to the first event before handing the stream over, as `OpenAIChatModel` peeks: an
        # error event or an empty stream fails the request itself, and the model name comes from it.
        chunks = response.aiter_bytes()
        decoder = SSEDecoder()
        backlog: list[bytes] = []
        try:
            async for raw in chunks:
                backlog.extend(decoder.feed(raw))
                if backlog:
                    break
            else:
                backlog.extend(decoder.close())
        except httpx.TransportError as error:
            raise transport_error(self._model_name, error) from error
        if not backlog or backlog[0].startswith(DONE):
            raise UnexpectedModelBehavior("Streamed response ended without content or tool calls")
        try:
            first = orjson.loads(backlog[0])
        except orjson.JSONDecodeError as error:
            raise ModelAPIError(
                model_name=self._model_name, message=f"Failed to decode response as JSON: {error}"
            ) from error
        if not isinstance(first, dict):
            raise ModelAPIError(model_name=self._model_name, message=f"Unexpected stream event: {backlog[0][:200]!r}")
        if error_body := first.get("error"):
            raise stream_error(self._model_name, error_body)
        stream = LeanStreamedResponse(
            model_request_parameters=params,
            _model_name=first.get("model") or self._model_name,
            _model_profile=self.profile,
            _provider_name=self._provider_name,
            _provider_url=self._base_url,
            _response=response,
            _bytes=chunks,
            _decoder=decoder,
            _first_chunk=first,
            _backlog=backlog[1:],
            _sink=sink,
            _window=self._coalesce_window if window is None else window,
        )
        stream.canonical_system = self._canonical_system_stamp
        return stream

    async def _send(self, request: httpx.Request, *, stream: bool, settings: ModelSettings) -> httpx.Response:
        """Send `request`, retrying failures before the response began if asked to; raise the mapped error."""
        max_retries = settings.get("max_retries", self._max_retries)
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.TransportError as error:
                if attempt >= max_retries:
                    raise transport_error(self._model_name, error) from error
            else:
                if response.status_code < 400:
                    return response
                content = await response.aread()
                await response.aclose()
                error = status_error(self._model_name, response.status_code, content, response.headers)
                if attempt >= max_retries or not _retryable(response.status_code):
                    raise error
                retry_after = error.retry_after
            attempt += 1
            await asyncio.sleep(_retry_delay(attempt, retry_after))


# Set by the caller around an agent's run (the turn's `agent_run_span`): which agent and conversation
# a model call serves, so each `model.generation` row rolls up per session and agent on its own.
generation_attributes: ContextVar[dict[str, str]] = ContextVar("generation_attributes", default={})  # noqa: B039


def record_generation(span: Span, response: ModelResponse, price: ModelPrice | None = None) -> None:
    """The response's model, usage, cost and finish reason on its `model.generation` span; the cost
    (None without a price) also goes to the turn's tally."""
    usage = response.usage
    cost = price.cost(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) if price is not None else None
    tally = turn_cost.get()
    if tally is not None:
        tally.add(cost)
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "popagent.usage.estimated": is_estimated(usage),
    }
    if cost is not None:
        attributes["popagent.usage.cost_usd"] = cost
    if response.model_name:
        attributes["gen_ai.response.model"] = response.model_name
    if response.provider_response_id:
        attributes["gen_ai.response.id"] = response.provider_response_id
    if response.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
    span.set_attributes(attributes)


class LeanModels:
    """The models of one OpenAI-compatible server (`NINEROUTER_URL`), sharing one keep-alive connection pool.

    A chat picks its model per request; `get` gives the model for an id, built once and kept.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        provider_name: str = "ninerouter",
        http_client: httpx.AsyncClient | None = None,
        coalesce_window: float = 0.02,
        max_retries: int = 0,
        merge_system_messages_for: Iterable[str] = MERGE_SYSTEM_MESSAGES_FOR,
    ) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._provider_name = provider_name
        self._own_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT, limits=DEFAULT_LIMITS)
        self._coalesce_window = coalesce_window
        self._max_retries = max_retries
        self._merge_system_messages_for = tuple(merge_system_messages_for)
        self._models: dict[str, LeanOpenAIModel] = {}
        # One reader of the gateway's catalog for the process: the prices here, the context windows
        # of observational memory (turn.observational.windows) too.
        self.catalog = ModelCatalog(base_url, self._client, api_key=api_key)
        self.prices = ModelPrices(self.catalog)

    @property
    def base_url(self) -> str:
        return self._base_url

    def preload(self) -> None:
        """Pay the one-time cost of building a model now rather than in the first turn.

        pydantic-ai loads genai-prices' data snapshot when its first `Model` is built: 0.1 s of CPU
        (0.3 s where bytecode is not cached), which the first chat after start would wait for.
        """
        LeanOpenAIModel("preload", base_url=self._base_url, http_client=self._client)
        self.prices.refresh_soon()

    def get(self, model_name: str) -> LeanOpenAIModel:
        """The model for `model_name`, the id exactly as the server lists it (`fake/fake-chat`)."""
        model = self._models.get(model_name)
        if model is None:
            model = self._models[model_name] = LeanOpenAIModel(
                model_name,
                base_url=self._base_url,
                api_key=self._api_key,
                provider_name=self._provider_name,
                http_client=self._client,
                coalesce_window=self._coalesce_window,
                max_retries=self._max_retries,
                merge_system_messages_for=self._merge_system_messages_for,
                prices=self.prices,
            )
        return model

    async def aclose(self) -> None:
        await self.catalog.aclose()
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _retryable(status_code: int) -> bool:
    return status_code in RETRYABLE_STATUSES or status_code >= 500


def _retry_delay(attempt: int, retry_after: float | None) -> float:
    # The openai SDK's policy: the server's `Retry-After` when it is sensible, else backoff with jitter.
    if retry_after is not None and 0 < retry_after <= 60:
        return retry_after
    return min(0.5 * 2 ** (attempt - 1), 8.0) * (1 - 0.25 * random.random())

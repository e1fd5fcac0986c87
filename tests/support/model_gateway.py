"""A scripted OpenAI-compatible model server, reached over real HTTP.

Tests and benchmarks point a client (the openai SDK, pydantic-ai's `OpenAIChatModel`,
our own lean model) at `gw.url` exactly as they would at 9Router, and the server
answers from a script instead of a model:

    async with ModelGateway([Turn.call(ToolCall("getTime", {"tz": "UTC"})), Turn.say("It is noon.")],
                            api_key="sk-test") as gw:
        ...  # OpenAIProvider(base_url=gw.url, api_key="sk-test")
        assert gw.requests[1]["messages"][-1]["role"] == "tool"

It behaves like 9Router where clients must care (docs/configuration.md, "Pointing it at a model gateway"): `GET /v1/models`
needs no key and carries `context_length` / `capabilities.contextWindow`; chat needs
`Authorization: Bearer <key>` when a key is configured; a body without `"stream"` is
answered as a stream; a turn may end with two `data: [DONE]` lines and with an
estimated usage block on the finish chunk before the real usage chunk.

Retrieval: `POST /v1/embeddings` answers OpenAI's shape with deterministic vectors (`text_vector`: a
hashed bag of words, L2-normalized, so texts that share words have similar vectors and the same
text always has the same vector), and `POST /v1/rerank` answers the Jina/Cohere shape
(`{model, query, documents, top_n}` -> `{results: [{index, relevance_score}]}`) scoring each
document by the share of the query's words it contains. Both need the key like chat; their
bodies are recorded in `gw.embedding_requests` and `gw.rerank_requests`, and
`gw.fail_retrieval = (status, message)` makes both answer that error.

`ModelGateway(..., ninerouter_usage=True)` (or setting `gw.ninerouter_usage`) reports usage as
9Router 0.5.69 does in front of an upstream: a non-streamed answer's `prompt_tokens` carry 2000
more than the upstream counted, without saying so, and a streamed answer puts an estimate
(`"estimated": true`) on its finish chunk before the upstream's real usage chunk (sent only when
the request asked for it with `stream_options.include_usage`).

A script is a list of `Turn`s consumed one per chat request, or a callable that
decides the turn from the request body (`gw.push(...)` queues more turns; queued turns
are used before the callable). A request with nothing left to answer gets a 400 that
says so, so a test with a short script fails loudly instead of hanging.

As a process (benchmarks, e2e stacks): `python -m support.model_gateway --port N
--script turns.json [--api-key K] [--loop]`, or `--script package.module:function` for
a callable. It prints `model gateway listening on <url>` once it accepts connections
and stops on SIGTERM/SIGINT. The JSON file is a list of turns or
`{"turns": [...], "models": [...], "api_key": "...", "loop": true, "ninerouter_usage": true, "by_prompt":
[{"contains": "...", "turn": {...}}]}` (`by_prompt`: see `load_script`); a turn is
`{"text": ..., "tool_calls": [{"name", "arguments", "id"}], "error": {"status",
"message", "retry_after"}, "chunk_size", "first_byte_delay_s", "chunk_delay_s",
"break_after_chunks", "usage": {"prompt_tokens", "completion_tokens"}, "double_done",
"estimated_usage_in_finish", "usage_chunk", "finish_reason"}` (every key optional).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import itertools
import json
import logging
import math
import re
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import uvicorn

__all__ = [
    "ModelGateway",
    "ModelInfo",
    "ToolCall",
    "Turn",
    "Usage",
    "load_script",
    "text_vector",
    "text_words",
    "tool_call_then_answer",
]

Body = dict[str, Any]
NINEROUTER_PROMPT_INFLATION = 2000
"""What 9Router 0.5.69 adds to `prompt_tokens` in a non-streamed answer (`ninerouter_usage`)."""
Responder = Callable[[Body], "Turn | Awaitable[Turn]"]


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """One entry of `GET /v1/models`."""

    id: str = "fake/fake-chat"
    context_length: int = 128_000
    max_completion_tokens: int = 16_384
    # OpenRouter-style prices, USD per token as strings (`prompt`, `completion`, `input_cache_read`); none: unpriced.
    pricing: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **({"pricing": dict(self.pricing)} if self.pricing else {}),
            "id": self.id,
            "object": "model",
            "created": 0,
            "owned_by": self.id.split("/", 1)[0],
            "context_length": self.context_length,
            "max_completion_tokens": self.max_completion_tokens,
            "capabilities": {"contextWindow": self.context_length, "maxOutput": self.max_completion_tokens},
        }


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A function call the model makes. `arguments` is a JSON string or a mapping to encode."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None  # assigned `call_<n>` when not given

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclasses.dataclass(frozen=True)
class Turn:
    """One scripted answer. Build with `Turn.say`, `Turn.call` or `Turn.fail`."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    # An HTTP error instead of an answer when not 200.
    status: int = 200
    error_message: str = ""
    retry_after: float | None = None
    # Streaming shape: characters per text or arguments chunk, pauses, and faults.
    chunk_size: int = 8
    first_byte_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    break_after_chunks: int | None = None  # close the connection after this many chunks, no [DONE]
    double_done: bool = False
    estimated_usage_in_finish: bool = False
    usage: Usage | None = None  # estimated from the request and reply when not given
    usage_chunk: bool = True  # False: no usage chunk even when asked for (an upstream that sends none)
    finish_reason: str | None = None  # "tool_calls" or "stop" when not given
    # In-process only: after this many chunks the stream waits until `resume` is set (a test holds a
    # turn running until its client is there, whatever the machine's load).
    pause_after_chunks: int | None = None
    resume: asyncio.Event | None = None

    @classmethod
    def say(cls, text: str, **options: Any) -> Turn:
        return cls(text=text, **options)

    @classmethod
    def call(cls, *calls: ToolCall, text: str = "", **options: Any) -> Turn:
        if not calls:
            raise ValueError("Turn.call needs at least one ToolCall")
        return cls(text=text, tool_calls=calls, **options)

    @classmethod
    def fail(cls, status: int, message: str = "", *, retry_after: float | None = None, **options: Any) -> Turn:
        if status < 400:
            raise ValueError("Turn.fail needs an HTTP error status")
        return cls(status=status, error_message=message, retry_after=retry_after, **options)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Turn:
        """A turn from the JSON script format (see the module docstring)."""
        fields = dict(raw)
        error = fields.pop("error", None)
        if error is not None:
            fields["status"] = error["status"]
            fields["error_message"] = error.get("message", "")
            fields["retry_after"] = error.get("retry_after")
        if "tool_calls" in fields:
            fields["tool_calls"] = tuple(ToolCall(**call) for call in fields["tool_calls"])
        if fields.get("usage") is not None:
            fields["usage"] = Usage(**fields["usage"])
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown turn keys: {sorted(unknown)}")
        return cls(**fields)


def tool_call_then_answer(call: ToolCall, answer: str, **options: Any) -> Responder:
    """A responder for delegation-style loops: call `call` when the user spoke last, else answer."""

    def respond(body: Body) -> Turn:
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "user":
            return Turn.call(call, **options)
        return Turn.say(answer, **options)

    return respond


def by_prompt(choices: Sequence[tuple[str, Turn]], otherwise: Turn) -> Responder:
    """A responder answering the first of `choices` whose text the last user message contains, else `otherwise`."""

    def respond(body: Body) -> Turn:
        users = [message for message in body.get("messages") or [] if message.get("role") == "user"]
        said = json.dumps(users[-1].get("content")) if users else ""
        return next((turn for text, turn in choices if text in said), otherwise)

    return respond


def load_script(path: Path) -> tuple[list[Turn] | Responder, dict[str, Any]]:
    """Turns and server options (`models`, `api_key`, `loop`, `ninerouter_usage`) from a JSON script file;
    with `by_prompt` ([{"contains": text, "turn": turn}]), a responder answering each request with the
    first turn whose text its last user message contains, else with the script's first turn."""
    raw = json.loads(path.read_text())
    if isinstance(raw, list):
        raw = {"turns": raw}
    options: dict[str, Any] = {}
    if "models" in raw:
        options["models"] = [ModelInfo(**model) for model in raw["models"]]
    for key in ("api_key", "loop", "ninerouter_usage"):
        if key in raw:
            options[key] = raw[key]
    turns = [Turn.from_dict(turn) for turn in raw.get("turns", [])]
    if "by_prompt" in raw:
        choices = [(choice["contains"], Turn.from_dict(choice["turn"])) for choice in raw["by_prompt"]]
        return by_prompt(choices, turns[0]), options
    return turns, options


# -- retrieval ------------------------------------------------------------------

EMBEDDING_DIMS = 256
_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def text_words(text: str) -> list[str]:
    """The words the scripted retrieval sees: lower-case alphanumeric runs, stop words out, a plural `s` off."""
    words = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP_WORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(word)
    return words


def text_vector(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """A deterministic embedding: each word hashed to a signed slot, counts dampened, L2-normalized."""
    counts: collections.Counter[str] = collections.Counter(text_words(text))
    vector = [0.0] * dims
    for word, count in counts.items():
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dims
        sign = 1.0 if digest[4] & 1 else -1.0
        vector[slot] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        # A text with no words still gets a unit vector (a real model never answers zeros).
        vector[0] = 1.0
        return vector
    return [value / norm for value in vector]


def _rerank_score(query_words: set[str], document: str) -> float:
    if not query_words:
        return 0.0
    document_words = set(text_words(document))
    shared = len(query_words & document_words)
    # The share of the query found, with a small preference for shorter (more focused) documents.
    return shared / len(query_words) + 0.01 / (1 + len(document_words)) ** 0.5


class _BrokenStream(Exception):
    """Raised inside a response to make the server drop the connection mid-stream."""


class _DropBrokenStreamLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        return not isinstance(error, _BrokenStream)


def _quiet_broken_streams() -> None:
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropBrokenStreamLogs) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(_DropBrokenStreamLogs())


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), max(1, size)):
        yield text[start : start + max(1, size)]


class ModelGateway:
    """The scripted server. Use as `async with ModelGateway(...) as gw:`, or `start()`/`stop()`."""

    def __init__(
        self,
        script: Sequence[Turn] | Responder = (),
        *,
        api_key: str | None = None,
        models: Sequence[ModelInfo] = (ModelInfo(),),
        host: str = "127.0.0.1",
        port: int = 0,
        loop: bool = False,
        record: bool = True,
        ninerouter_usage: bool = False,
        embedding_dims: int = EMBEDDING_DIMS,
    ) -> None:
        self.responder: Responder | None = None
        self._turns: collections.deque[Turn] = collections.deque()
        if callable(script):
            self.responder = script
        else:
            self._turns.extend(script)
        self.api_key = api_key
        self.models = list(models)
        self.host = host
        self.port = port
        self.loop = loop
        self.record = record
        self.ninerouter_usage = ninerouter_usage
        # Bodies of the chat requests that passed authentication, in arrival order.
        self.requests: list[Body] = []
        self.unauthorized = 0  # chat requests refused for a missing or wrong key
        self.disconnected = 0  # streams the client abandoned before the end
        self.embedding_dims = embedding_dims
        self.embedding_requests: list[Body] = []  # bodies of /v1/embeddings requests that passed authentication
        self.rerank_requests: list[Body] = []
        self.fail_retrieval: tuple[int, str] | None = None  # (status, message) for /v1/embeddings and /v1/rerank
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    # -- script ---------------------------------------------------------------

    def push(self, *turns: Turn) -> None:
        """Queue more turns; they are answered before the callable script, if any."""
        self._turns.extend(turns)

    @property
    def pending(self) -> int:
        """Queued turns not yet used."""
        return len(self._turns)

    def reset(self) -> None:
        """Forget the script and what was recorded, as a fresh server would have it.

        A server shared by many tests is reset before each one: a failed test may leave
        turns queued or a responder set, and the next test must not get them. The models,
        the key, how usage is reported (`ninerouter_usage`) and the call-id counter stay
        (ids stay unique over the server's life).
        """
        self._turns.clear()
        self.responder = None
        self.requests.clear()
        self.unauthorized = 0
        self.disconnected = 0
        self.embedding_requests.clear()
        self.rerank_requests.clear()
        self.fail_retrieval = None

    @property
    def embedded_inputs(self) -> int:
        """How many texts `/v1/embeddings` has embedded (every batch's inputs)."""
        return sum(len(body["input"]) for body in self.embedding_requests)

    async def _next_turn(self, body: Body) -> Turn | None:
        if self._turns:
            turn = self._turns.popleft()
            if self.loop:
                self._turns.append(turn)
            return turn
        if self.responder is not None:
            turn = self.responder(body)
            return await turn if inspect.isawaitable(turn) else turn
        return None

    # -- lifecycle ------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, ending in `/v1`."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("model gateway already started")
        _quiet_broken_streams()
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says
        # TCP, and without it a reused connection stalls ~40 ms on Nagle before each body.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._server = _InProcessServer(self._config())
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="model-gateway")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # start-up failed: raise its error
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None

    async def __aenter__(self) -> ModelGateway:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self,
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            http="auto",  # httptools when installed, else h11
            timeout_graceful_shutdown=1,
        )

    # -- ASGI -----------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"].rstrip("/")
        method: str = scope["method"]
        if path == "/v1/models" and method == "GET":
            await _json(send, 200, {"object": "list", "data": [model.to_json() for model in self.models]})
        elif path == "/v1/chat/completions" and method == "POST":
            await self._chat(scope, receive, send)
        elif path == "/v1/embeddings" and method == "POST":
            await self._retrieval(scope, receive, send, self._embeddings)
        elif path == "/v1/rerank" and method == "POST":
            await self._retrieval(scope, receive, send, self._rerank)
        elif path in {"/v1/models", "/v1/chat/completions", "/v1/embeddings", "/v1/rerank"}:
            await _json(send, 405, _error_body("method not allowed", "invalid_request_error"))
        else:
            await _json(send, 404, _error_body(f"no route {path}", "invalid_request_error"))

    async def _retrieval(
        self, scope: dict[str, Any], receive: Any, send: Any, answer: Callable[[Body], tuple[int, Body]]
    ) -> None:
        raw = await _read_body(receive)
        if self.api_key is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode("latin-1") != f"Bearer {self.api_key}":
                self.unauthorized += 1
                await _json(send, 401, _error_body("invalid or missing API key", "invalid_request_error"))
                return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            await _json(send, 400, _error_body("request body is not a JSON object", "invalid_request_error"))
            return
        if self.fail_retrieval is not None:
            status, message = self.fail_retrieval
            await _json(
                send, status, _error_body(message, "server_error" if status >= 500 else "invalid_request_error")
            )
            return
        status, payload = answer(body)
        await _json(send, status, payload)

    def _embeddings(self, body: Body) -> tuple[int, Body]:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(text, str) for text in inputs):
            return 400, _error_body("`input` must be a string or a non-empty list of strings", "invalid_request_error")
        if not body.get("model"):
            return 400, _error_body("`model` is required", "invalid_request_error")
        if self.record:
            self.embedding_requests.append({**body, "input": inputs})
        tokens = sum(len(text.split()) for text in inputs)
        data = [
            {"object": "embedding", "index": index, "embedding": text_vector(text, self.embedding_dims)}
            for index, text in enumerate(inputs)
        ]
        return 200, {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _rerank(self, body: Body) -> tuple[int, Body]:
        query, documents, top_n = body.get("query"), body.get("documents"), body.get("top_n")
        if not isinstance(query, str) or not isinstance(documents, list) or not body.get("model"):
            return 400, _error_body("`model`, `query` and `documents` are required", "invalid_request_error")
        texts = [doc if isinstance(doc, str) else str((doc or {}).get("text", "")) for doc in documents]
        if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
            return 400, _error_body("`top_n` must be a positive integer", "invalid_request_error")
        if self.record:
            self.rerank_requests.append(body)
        query_words = set(text_words(query))
        scored = sorted(
            ({"index": index, "relevance_score": _rerank_score(query_words, text)} for index, text in enumerate(texts)),
            key=lambda result: -result["relevance_score"],
        )
        if top_n is not None:
            scored = scored[:top_n]
        tokens = len(query.split()) + sum(len(text.split()) for text in texts)
        return 200, {"model": body["model"], "results": scored, "usage": {"total_tokens": tokens}}

    async def _chat(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = await _read_body(receive)
        if self.api_key is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode("latin-1") != f"Bearer {self.api_key}":
                self.unauthorized += 1
                await _json(send, 401, _error_body("invalid or missing API key", "invalid_request_error"))
                return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            await _json(send, 400, _error_body("request body is not a JSON object", "invalid_request_error"))
            return
        if self.record:
            self.requests.append(body)
        turn = await self._next_turn(body)
        if turn is None:
            await _json(
                send, 400, _error_body("model gateway: no scripted turn left for this request", "script_exhausted")
            )
            return
        if turn.first_byte_delay_s:
            await asyncio.sleep(turn.first_byte_delay_s)
        if turn.status != 200:
            headers = [] if turn.retry_after is None else [(b"retry-after", _number(turn.retry_after).encode())]
            kind = "rate_limit_error" if turn.status == 429 else "server_error"
            await _json(send, turn.status, _error_body(turn.error_message or f"scripted {turn.status}", kind), headers)
            return
        reply = _Reply(turn, body, next(self._ids), self._call_ids(), ninerouter_usage=self.ninerouter_usage)
        # Like 9Router: a request that does not say `"stream": false` is answered as a stream.
        if body.get("stream", True) is False:
            await _json(send, 200, reply.completion())
            return
        await self._stream(reply, receive, send, bool((body.get("stream_options") or {}).get("include_usage")))

    def _call_ids(self) -> Iterator[str]:
        return (f"call_{n}" for n in self._ids)

    async def _stream(self, reply: _Reply, receive: Any, send: Any, include_usage: bool) -> None:
        turn = reply.turn
        gone = asyncio.Event()

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch_disconnect())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
                }
            )
            for sent, chunk in enumerate(reply.chunks(include_usage)):
                if turn.break_after_chunks is not None and sent >= turn.break_after_chunks:
                    raise _BrokenStream("scripted broken stream")
                if gone.is_set():
                    self.disconnected += 1
                    return
                if sent and turn.chunk_delay_s:
                    await asyncio.sleep(turn.chunk_delay_s)
                if turn.resume is not None and sent == turn.pause_after_chunks:
                    await turn.resume.wait()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


class _InProcessServer(uvicorn.Server):
    """uvicorn without its signal handlers: the process hosting the test owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Reply:
    """One turn rendered as OpenAI chat completion JSON or SSE chunks."""

    def __init__(
        self, turn: Turn, body: Body, number: int, call_ids: Iterator[str], *, ninerouter_usage: bool = False
    ) -> None:
        self.turn = turn
        self.ninerouter_usage = ninerouter_usage
        self.id = f"chatcmpl-{number}"
        self.model = str(body.get("model", ""))
        self.created = int(time.time())
        self.calls = [(call.id or next(call_ids), call) for call in turn.tool_calls]
        self.finish_reason = turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")
        self.usage = turn.usage or self._estimated_usage(body)

    def _estimated_usage(self, body: Body) -> Usage:
        prompt = len(json.dumps(body.get("messages", []))) // 4
        completion = (
            len(self.turn.text) + sum(len(c.arguments_json()) + len(c.name) for c in self.turn.tool_calls)
        ) // 4
        return Usage(max(1, prompt), max(1, completion))

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.turn.text or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json()}}
                for call_id, call in self.calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}],
            "usage": self._completion_usage().to_json(),
        }

    def _completion_usage(self) -> Usage:
        if not self.ninerouter_usage:
            return self.usage
        # 9Router 0.5.69 adds 2000 to a non-streamed answer's prompt tokens, and says nothing of it.
        return Usage(self.usage.prompt_tokens + NINEROUTER_PROMPT_INFLATION, self.usage.completion_tokens)

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        return _sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
                **extra,
            }
        )

    def _deltas(self) -> Iterator[dict[str, Any]]:
        size = self.turn.chunk_size
        for piece in _pieces(self.turn.text, size):
            yield {"content": piece}
        for index, (call_id, call) in enumerate(self.calls):
            yield {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
            for piece in _pieces(call.arguments_json(), size):
                yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}

    def chunks(self, include_usage: bool) -> Iterator[bytes]:
        first = True
        for delta in self._deltas():
            if first:
                delta = {"role": "assistant", **delta}
                first = False
            yield self._chunk(delta)
        if first:  # nothing to say: still announce the assistant
            yield self._chunk({"role": "assistant", "content": ""})
        extra: dict[str, Any] = {}
        if self.turn.estimated_usage_in_finish or self.ninerouter_usage:
            # 9Router: a rough estimate on the finish chunk, the real figures after it.
            estimate = Usage(self.usage.prompt_tokens + 7, self.usage.completion_tokens + 3)
            extra["usage"] = {**estimate.to_json(), "estimated": True}
        yield self._chunk({}, self.finish_reason, **extra)
        if include_usage and self.turn.usage_chunk:
            yield _sse(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage.to_json(),
                }
            )
        yield b"data: [DONE]\n\n"
        if self.turn.double_done:
            yield b"data: [DONE]\n\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _read_body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


async def _json(send: Any, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    data = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})


# -- as a process ---------------------------------------------------------------


def _responder_from(spec: str) -> Responder:
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


async def _serve_forever(gateway: ModelGateway) -> None:
    await gateway.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"model gateway listening on {gateway.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await gateway.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m support.model_gateway", description="A scripted OpenAI-compatible model server."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    parser.add_argument("--script", required=True, help="a JSON script file, or package.module:function")
    parser.add_argument("--api-key", default=None, help="require `Authorization: Bearer <key>` on chat requests")
    parser.add_argument("--loop", action="store_true", help="repeat the scripted turns forever")
    parser.add_argument("--no-record", action="store_true", help="do not keep request bodies (long benchmarks)")
    parser.add_argument("--ninerouter-usage", action="store_true", help="report usage as 9Router 0.5.69 does")
    args = parser.parse_args(argv)

    options: dict[str, Any] = {}
    script: Sequence[Turn] | Responder
    if args.script.endswith(".json"):
        script, options = load_script(Path(args.script))
    else:
        script = _responder_from(args.script)
    if args.api_key is not None:
        options["api_key"] = args.api_key
    if args.loop:
        options["loop"] = True
    if args.ninerouter_usage:
        options["ninerouter_usage"] = True
    gateway = ModelGateway(script, host=args.host, port=args.port, record=not args.no_record, **options)
    asyncio.run(_serve_forever(gateway))


if __name__ == "__main__":
    main()

"""Development aid for the web UI (not a test): the real stack, fronted by a proxy whose
POST /api/chat answers a scripted turn, for working on the chat UI before agent-runner's
chat turn exists.

    .venv/bin/python tests/ui/devserver.py [--port 5180]

Everything but /api/chat goes to the real gateway (which serves ui/dist at /). The
scripted turn is encoded by the gateway's own UIStreamEncoder, so the browser reads the
exact protocol the gateway speaks. The newest message's text picks the script: "slow"
(a long, slow answer to stop), "delegate" (a delegation with agentActivity parts), "fail"
(an error chunk mid-turn), "tool" (a tool call), anything else (an echo in pieces).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_dev.embedded import free_port
from popagent_dev.launcher import Stack, StackConfig
from popagent_gateway.streaming import DONE, UI_STREAM_HEADERS, UIStreamEncoder
from support.model_gateway import ModelGateway, ModelInfo

CATALOG = (ModelInfo("fake/fake-chat", context_length=128_000), ModelInfo("cx/gpt-5.3-codex", context_length=400_000))


def event(**kwargs: object) -> pb.TurnEvent:
    return pb.TurnEvent(**kwargs)  # type: ignore[arg-type]


def text_events(part_id: str, text: str, size: int) -> list[pb.TurnEvent]:
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [event(text_delta=pb.TextDelta(part_id=part_id, delta=piece)) for piece in pieces]


async def script(text: str, model: str) -> AsyncIterator[list[pb.TurnEvent]]:
    turn = f"turn-{uuid.uuid4().hex[:12]}"
    yield [event(start=pb.TurnStart(turn_id=turn, message_id=f"msg-{uuid.uuid4().hex[:12]}", model=model))]
    yield [event(step_start=pb.StepBoundary())]
    lowered = text.lower()
    if "delegate" in lowered:
        yield [
            event(
                tool_input=pb.ToolInput(
                    tool_call_id="c1", tool_name="delegate", input_json='{"agent": "researcher", "task": "look it up"}'
                )
            )
        ]
        for iteration, status in ((1, "running"), (2, "running"), (2, "done")):
            await asyncio.sleep(0.4)
            data = {"agent": "researcher", "status": status, "iteration": iteration, "summary": f"step {iteration}"}
            yield [event(agent_activity=pb.AgentActivity(activity_id="act-1", data_json=json.dumps(data)))]
        yield [event(tool_output=pb.ToolOutput(tool_call_id="c1", output_json='"notes from the researcher"'))]
        yield [event(step_finish=pb.StepBoundary()), event(step_start=pb.StepBoundary())]
    if "tool" in lowered:
        yield [event(tool_input=pb.ToolInput(tool_call_id="c2", tool_name="getTime", input_json='{"tz": "UTC"}'))]
        await asyncio.sleep(0.3)
        yield [event(tool_output=pb.ToolOutput(tool_call_id="c2", output_json='"12:00"'))]
        yield [event(step_finish=pb.StepBoundary()), event(step_start=pb.StepBoundary())]
    yield [event(text_start=pb.PartBoundary(part_id="t1"))]
    if "slow" in lowered:
        answer, delay = "Slow answer: " + " ".join(f"word{n}" for n in range(400)), 0.1
    elif "delegate" in lowered:
        answer, delay = "The researcher says the answer is 42.", 0.03
    else:
        answer, delay = (
            "Hello from the scripted model! This answer streams in small pieces so the browser sees it grow.",
            0.03,
        )
    for index, piece in enumerate(text_events("t1", answer, 6)):
        await asyncio.sleep(delay)
        yield [piece]
        if "fail" in lowered and index == 3:
            yield [event(error=pb.TurnError(error_class="provider", message="model provider unavailable (scripted)"))]
            return
    yield [event(text_end=pb.PartBoundary(part_id="t1")), event(step_finish=pb.StepBoundary())]
    yield [
        event(
            finish=pb.TurnFinish(finish_reason="stop", usage=pb.Usage(input_tokens=42, output_tokens=len(answer) // 4))
        )
    ]


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling, which would re-raise the signal before the stack stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_app(stack: Stack) -> Starlette:
    client = httpx.AsyncClient(base_url=stack.url, timeout=None)

    async def chat(request: Request) -> Response:
        if request.headers.get("x-popagent-key") != stack.api_key:
            return JSONResponse({"error": "missing or wrong x-popagent-key"}, status_code=401)
        body = await request.json()
        text = "".join(p.get("text", "") for p in body["message"]["parts"] if p.get("type") == "text")

        async def sse() -> AsyncIterator[bytes]:
            encoder = UIStreamEncoder()
            async for events in script(text, body.get("model") or "fake/fake-chat"):
                yield encoder.encode(pb.TurnEventBatch(events=events))
            yield DONE

        return StreamingResponse(sse(), media_type="text/event-stream", headers=UI_STREAM_HEADERS)

    async def proxy(request: Request) -> Response:
        upstream = await client.send(
            client.build_request(
                request.method,
                request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                headers=[(k, v) for k, v in request.headers.raw if k.lower() not in (b"host", b"content-length")],
                content=await request.body(),
            ),
            stream=True,
        )
        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
        }
        return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code, headers=headers)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/api/chat", chat, methods=["POST"]), Route("/{path:path}", proxy, methods=methods)])


async def main(port: int) -> None:
    import os

    async with ModelGateway(models=CATALOG) as models:
        os.environ["NINEROUTER_URL"] = models.url
        data = Path(tempfile.mkdtemp(prefix="popagent-ui-dev-"))
        async with Stack(StackConfig(data_dir=data, gateway_port=free_port(), echo_logs=False)).running() as stack:
            sys.stdout.write(f"dev UI: http://127.0.0.1:{port}/  API key: {stack.api_key}  (gateway {stack.url})\n")
            sys.stdout.flush()
            server = _Server(uvicorn.Config(make_app(stack), host="127.0.0.1", port=port, log_level="warning"))
            # Ctrl-C / SIGTERM end the proxy; the stack (and its embedded PostgreSQL) then stops cleanly.
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
            await server.serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=5180)
    asyncio.run(main(parser.parse_args().port))

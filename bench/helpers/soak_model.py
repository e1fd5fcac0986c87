"""The scripted model server of bench/soak.py, as a process: a paced streamed answer to everything,
and an HTTP 400 to a turn whose newest user message starts with the failure marker.

    python -m bench.helpers.soak_model --port N --chunks 50 --chunk-delay-ms 20 --marker INJECT-FAILURE
        [--long-marker LONG-ANSWER --long-chunks 9000]

(the repository root and tests/ on PYTHONPATH). A 400 is a request error the model client does not
retry, so the turn, and the task attempt running it, fails once for every marked prompt. A
remediation task quotes the failed task's prompt after its own text, so it is answered normally.
A prompt starting with the long marker gets `--long-chunks` chunks at the same pace (a stream that
outlasts a slow reader's window, bench/slow_clients.py).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from support.model_gateway import ModelGateway, ModelInfo, Turn

# The seeded default model and the specialists' override: the gateway refuses a run on a model
# the catalog lacks.
CATALOG = ("fake/fake-chat", "cx/gpt-5.3-codex", "cx/gpt-5.3-codex-spark")


def newest_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return ""
    return ""


async def serve(gateway: ModelGateway) -> None:
    """Serve until SIGTERM or SIGINT; the bench reads the URL from the first line."""
    await gateway.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"model gateway listening on {gateway.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-delay-ms", type=float, default=20.0)
    parser.add_argument("--marker", default="INJECT-FAILURE")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--long-marker", default="LONG-ANSWER", help="a prompt starting with it gets the long answer")
    parser.add_argument("--long-chunks", type=int, default=0, help="chunks of the long answer (0: the usual answer)")
    args = parser.parse_args()
    text = "".join(f"{n % 1000:03d} " for n in range(args.chunks))
    long_text = "".join(f"{n % 1000:03d} " for n in range(args.long_chunks or args.chunks))

    def respond(body: dict[str, Any]) -> Turn:
        prompt = newest_user_text(body).lstrip()
        if prompt.startswith(args.marker):
            return Turn.fail(400, "injected task failure")
        answer = long_text if prompt.startswith(args.long_marker) else text
        return Turn.say(answer, chunk_size=4, chunk_delay_s=args.chunk_delay_ms / 1000)

    gateway = ModelGateway(
        respond,
        api_key=args.api_key,
        models=[ModelInfo(id=model) for model in CATALOG],
        port=args.port,
        record=False,
    )
    asyncio.run(serve(gateway))


if __name__ == "__main__":
    main()

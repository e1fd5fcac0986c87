"""The chat completion the model benchmarks send straight to the scripted model server."""

from __future__ import annotations

import orjson


def streamed_go(model: str) -> bytes:
    """The JSON body of a streamed chat completion of `model` for the one-word prompt "Go", with usage."""
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Go"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )

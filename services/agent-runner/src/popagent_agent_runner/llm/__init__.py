"""The LLM client: a lean pydantic-ai `Model` for any OpenAI-compatible `/v1/chat/completions` server.

| module | does |
|---|---|
| `model.py` | `LeanOpenAIModel` (the pydantic-ai `Model`) and `LeanModels` (one per server, one connection pool) |
| `stream.py` | the streamed response, and the per-turn sink its text goes to at once |
| `wire.py` | SSE framing and the classification of provider errors |
| `transport.py` | HTTP/1.1 to the model server on asyncio streams, behind httpx's API |

This package never imports `turn/`: the turn uses the client, not the other way round.
"""

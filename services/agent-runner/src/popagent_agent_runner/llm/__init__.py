"""The LLM client: a lean pydantic-ai `Model` for any OpenAI-compatible `/v1/chat/completions` server.

| module | does |
|---|---|
| `model.py` | `LeanOpenAIModel` (the pydantic-ai `Model`: the exchange with the server) and `LeanModels` (one connection pool per server) |
| `request.py` | request encoding: profile and thinking hooks, tools, messages, the request body |
| `response.py` | response decoding: a complete answer, usage, logprobs, finish reasons |
| `stream.py` | the streamed response, and the per-turn sink its text goes to at once |
| `wire.py` | SSE framing and the classification of provider errors |
| `transport.py` | HTTP/1.1 to the model server on asyncio streams, behind httpx's API |
| `profile.py` | the model profile an OpenAI-compatible server's model gets |
| `pydantic_ai_internals.py` | every private pydantic-ai name the client uses, and nowhere else |

This package never imports `turn/`: the turn uses the client, not the other way round.
"""

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
| `catalog.py` | the model catalog the gateway lists |
| `embeddings.py` | embeddings and reranking through the model gateway |
| `prices.py` | the cost of a turn from the catalog's prices |
| `pydantic_ai_internals.py` | every private pydantic-ai name the client uses, and nowhere else |

The bottom of agent-runner's layers (above `failures.py`): it imports nothing else of the service.
"""

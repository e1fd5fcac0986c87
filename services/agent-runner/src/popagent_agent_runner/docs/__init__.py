"""Workspace documentation RAG: a workspace's Markdown and added documents, searchable by the agents and the API.

| module | does |
|---|---|
| `chunking.py` | Markdown into heading-path chunks of bounded size (semchunk inside each section) |
| `store.py` | `DocsStore`: documents, chunks (pgvector + tsvector) and index runs; `queries.sql` |
| `indexer.py` | `DocsIndexer`: the incremental, resumable background index run per workspace |
| `search.py` | `DocsSearch`: vector + full-text candidates, reciprocal rank fusion, optional rerank |
| `documents.py` | `Documentation`: the one object `servicers/documents.py` and the `searchDocs` tool use |

Embeddings and reranking go through the model gateway (`llm.embeddings`); the models are
settings (`POPAGENT_DOCS_EMBEDDING_MODEL`, `POPAGENT_DOCS_RERANK_MODEL`).
"""

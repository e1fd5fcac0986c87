"""Observational memory: long threads carried as `[observations][recent raw messages]`.

| module | does |
|---|---|
| `tokens.py` | offline o200k token counts (bpe-openai), message framing, provider calibration |
| `observer.py` | the Observer and Reflector agents and the three-dated observation format |
| `memory.py` | settings, the per-thread cursor and log, thresholds, buffering, the context-window guard |
| `recall.py` | `HistorySearch`: the `recall` tool's search over a thread's original messages |
| `windows.py` | the models' context windows from the gateway's catalog |
| `queries.sql` | their SQL |
"""

from pathlib import Path

from popagent_core.db import load_queries

# The named queries of this package's stores.
QUERIES = load_queries(Path(__file__).parent / "queries.sql")

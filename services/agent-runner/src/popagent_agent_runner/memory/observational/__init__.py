"""Observational memory: long threads carried as `[observations][recent raw messages]`.

| module | does |
|---|---|
| `memory.py` | `ObservationalMemory`: a turn's `context()` before its model call and `after_turn()` after it |
| `store.py` | every read and write of the settings, the per-thread cursor and log, raw messages' token counts |
| `policy.py` | the thresholds: when to observe, reflect, buffer, activate or wait; what fits a model's window |
| `background.py` | Observer and Reflector runs, in a turn or in the background between turns, and closing them |
| `layout.py` | the request: observations block, gap markers, the context-window guard's marker, `lay_out` |
| `observer.py` | the Observer and Reflector agents and the three-dated observation format |
| `tokens.py` | offline o200k token counts (bpe-openai), message framing, provider calibration |
| `recall.py` | `HistorySearch`: the `recall` tool's search over a thread's original messages |
| `windows.py` | the models' context windows from the gateway's catalog |
| `queries.sql` | their SQL |
"""

from pathlib import Path

from popagent_core.db import load_queries

# The named queries of this package's stores.
QUERIES = load_queries(Path(__file__).parent / "queries.sql")

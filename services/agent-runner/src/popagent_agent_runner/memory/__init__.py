"""Memory: long-term memories, chat threads and observational memory.

| module | does |
|---|---|
| `long_term.py` | long-term memories (`remember`, the memories API) and the ones put before a turn |
| `threads.py` | thread history in, messages and outcome evidence out |
| `observational/` | observational memory: token accounting, Observer and Reflector, the context-window guard |
"""

from pathlib import Path

from popagent_core.db import load_queries

# The named queries of this package's stores.
QUERIES = load_queries(Path(__file__).parent / "queries.sql")

"""Memory: long-term memories, chat threads and observational memory.

| module | does |
|---|---|
| `long_term.py` | long-term memories (`remember`, the memories API) and the ones relevant to a turn's prompt |
| `long_term.sql` | its SQL |
| `threads.py` | thread history in, messages and outcome evidence out |
| `threads.sql` | its SQL (the turn's prelude reads observational memory's rows too) |
| `observational/` | observational memory: token accounting, Observer and Reflector, the context-window guard |
"""

from pathlib import Path

from popagent_core.db import load_queries

# The named queries of each store of this package.
LONG_TERM_QUERIES = load_queries(Path(__file__).with_name("long_term.sql"))
THREAD_QUERIES = load_queries(Path(__file__).with_name("threads.sql"))

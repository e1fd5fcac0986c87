"""Observational memory (issue 19): long threads carried as `[observations][recent raw messages]`.

| module | does |
|---|---|
| `tokens.py` | offline o200k token counts (bpe-openai), message framing, provider calibration |
| `observer.py` | the Observer and Reflector agents and the three-dated observation format |
| `memory.py` | settings, the per-thread cursor and log, thresholds, buffering, the context-window guard |
| `windows.py` | the models' context windows from the gateway's catalog |
| `queries.sql` | their SQL |
"""

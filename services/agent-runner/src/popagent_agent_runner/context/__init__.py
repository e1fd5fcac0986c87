"""What one turn's agents and tools reach: built once per turn by `turn/`, read by `tools/`.

| module | does |
|---|---|
| `deps.py` | `TurnContext` (one per turn) and `TurnDeps` (one per agent run), the tools' `ctx.deps` |
| `events.py` | the batched turn events and the assistant UI message |
| `hooks.py` | the turn's hook dispatch, gate and observational |
| `hands.py` | the turn's repository, sandbox and language servers (`TurnHands`) |
| `containment.py` | a self-update attempt's fixed tool policy and the record of its delegations |
"""

"""Human tool approvals: a tool call that must wait for a person's answer (docs/approvals.md).

| module | does |
|---|---|
| `policy.py` | an agent's approval policy: allow, ask or deny by tool or group, with argument conditions |
| `store.py` | approvals and session grants as records (`store.sql`) |
| `gate.py` | `ApprovalGate`: a call asks, waits for its answer, and an approved call runs once |
"""

"""The browser-bridge client the browser tools share.

| module | does |
|---|---|
| `access.py` | the process's `BrowserAccessPoint` and each turn's `TurnBrowser` (settings read once per turn) |
"""

"""The web clients `webSearch` and `webFetch` drive, one per process.

| module | does |
|---|---|
| `access.py` | `WebAccess`: both clients, built from the settings at start |
| `searxng.py` | the SearXNG JSON API client, results bounded before a model reads them |
| `page_fetcher.py` | one http(s) page as Markdown, through the kernel's address guard |
"""

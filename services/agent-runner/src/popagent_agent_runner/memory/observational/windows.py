"""Context windows of the model gateway's models, from its catalog (`GET {NINEROUTER_URL}/models`).

The same answer the gateway's catalog reads (`context_length`, or `capabilities.contextWindow`);
read through the process's one catalog reader (`llm.catalog`: kept for its TTL, and after a failed
fetch the last good answer is used; none: the window is unknown and the context-window guard has
nothing to hold the prompt to).
"""

from __future__ import annotations

import httpx

from popagent_agent_runner.llm.catalog import ModelCatalog
from popagent_core.model_catalog import context_window


class ContextWindows:
    def __init__(
        self, base_url: str, api_key: str | None, http: httpx.AsyncClient, *, catalog: ModelCatalog | None = None
    ) -> None:
        # The process's one catalog reader when given (the models' prices read the same answer).
        self.catalog = catalog or ModelCatalog(base_url, http, api_key=api_key)
        self._windows: dict[str, int] = {}
        self._version = 0

    async def window(self, model: str) -> int | None:
        entries = await self.catalog.entries()
        if entries is not None and self.catalog.version != self._version:
            windows: dict[str, int] = {}
            for entry in entries:
                window = context_window(entry)
                if window is not None:
                    windows[entry["id"]] = window
            self._windows, self._version = windows, self.catalog.version
        return self._windows.get(model)

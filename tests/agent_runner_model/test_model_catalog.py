"""agent-runner reads the model gateway's catalog once for the models' prices and their context
windows: one `GET /models` serves both, and a failed fetch keeps the last good answer."""

from __future__ import annotations

import httpx

from popagent_agent_runner.llm.model import LeanModels
from popagent_agent_runner.memory.observational.windows import ContextWindows
from support.model_gateway import ModelGateway, ModelInfo

API_KEY = "sk-catalog"
PRICED = ModelInfo(id="fake/priced", context_length=32_000, pricing={"prompt": "0.000002", "completion": "0.00001"})


async def test_prices_and_context_windows_share_one_catalog_read() -> None:
    reads: list[str] = []

    async def note(request: httpx.Request) -> None:
        if request.url.path.endswith("/models"):
            reads.append(request.method)

    async with (
        ModelGateway(models=[ModelInfo(), PRICED], api_key=API_KEY) as gateway,
        httpx.AsyncClient(event_hooks={"request": [note]}) as http,
        LeanModels(gateway.url, API_KEY, http_client=http) as models,
    ):
        windows = ContextWindows(gateway.url, API_KEY, http, catalog=models.catalog)
        models.preload()  # the service warms the prices at start
        assert await windows.window("fake/priced") == 32_000
        assert await windows.window("fake/fake-chat") == 128_000
        price = models.prices.price("fake/priced")
        assert price is not None and (price.input, price.output) == (0.000002, 0.00001)
        assert models.prices.price("fake/fake-chat") is None
        assert reads == ["GET"]


async def test_a_failed_catalog_read_keeps_the_last_good_answer() -> None:
    async with (
        ModelGateway(models=[PRICED], api_key=API_KEY) as gateway,
        httpx.AsyncClient() as http,
        LeanModels(gateway.url, API_KEY, http_client=http) as models,
    ):
        windows = ContextWindows(gateway.url, API_KEY, http, catalog=models.catalog)
        assert await windows.window("fake/priced") == 32_000
        await gateway.stop()
        models.catalog._fetched_at = float("-inf")  # pyright: ignore[reportPrivateUsage] # stale now
        assert await windows.window("fake/priced") == 32_000
        assert models.prices.price("fake/priced") is not None

"""Warm LSP hover on this repository's own Python code, against a baseline measured in the same run.

- baseline: a bare pygls `LanguageClient` started straight on basedpyright (the same node and
  server the manager starts) on the host, rooted at this repository (the bench's own checkout,
  trusted): didOpen, then `textDocument/hover`;
- ours: the `mastra_workspace_lsp_inspect` tool function itself (access check, the workspace
  containment read of the file, the shared server from the manager started in the sandbox,
  document sync, the answer with repository-relative paths), on the same position.

Both are warmed by a first hover (its time is printed as the cold start), then timed over
`--hovers` calls each, interleaved. Target: warm p50 <= 100 ms.

    .venv/bin/python -P bench/eyes_lsp.py [--hovers 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from popagent_agent_runner.context.hands import Hands
from popagent_agent_runner.lsp.languages import PYTHON, ServerCatalog
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.tools.lsp.lsp_inspect import lsp_inspect
from popagent_agent_runner.workspace.sandbox import Sandbox

REPO_ROOT = Path(__file__).resolve().parents[1]
# `Hands(...)` where agent-runner's service builds its hands: a class of this repository.
TARGET = "services/agent-runner/src/popagent_agent_runner/service.py"
NEEDLE = "hands = Hands("
TARGET_MS = 100.0


def position() -> tuple[int, int]:
    """(0-based line, 0-based character) of `Hands` in NEEDLE."""
    for number, text in enumerate((REPO_ROOT / TARGET).read_text().splitlines()):
        column = text.find(NEEDLE)
        if column >= 0:
            return number, column + len("hands = ")
    raise SystemExit(f"{NEEDLE!r} not found in {TARGET}")


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


class BareClient:
    """The baseline: pygls straight to the server, no manager, no containment, no shaping."""

    def __init__(self) -> None:
        self.client = LanguageClient("bench", "1")
        self.uri = (REPO_ROOT / TARGET).as_uri()

        @self.client.feature(types.WORKSPACE_CONFIGURATION)
        def _configuration(params: types.ConfigurationParams) -> list[Any]:
            return [None for _ in params.items]

        for method in ("pyright/beginProgress", "pyright/reportProgress", "pyright/endProgress"):
            self.client.feature(method)(lambda params: None)
        self.client.feature(types.WINDOW_LOG_MESSAGE)(lambda params: None)
        self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
        self.client.feature(types.CLIENT_REGISTER_CAPABILITY)(lambda params: None)

    async def start(self) -> None:
        command = ServerCatalog().command(PYTHON)
        environment = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
        await self.client.start_io(command.program, *command.args, cwd=str(REPO_ROOT), env=environment)
        server = self.client._server  # pyright: ignore[reportPrivateUsage]
        assert server is not None and server.stderr is not None
        self._drain = asyncio.create_task(self._read(server.stderr))
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                root_uri=REPO_ROOT.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=REPO_ROOT.as_uri(), name=REPO_ROOT.name)],
            )
        )
        self.client.initialized(types.InitializedParams())
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=self.uri, language_id="python", version=1, text=(REPO_ROOT / TARGET).read_text()
                )
            )
        )

    @staticmethod
    async def _read(stream: asyncio.StreamReader) -> None:
        while await stream.read(4096):
            pass

    async def hover(self, line: int, character: int) -> str:
        hover = await self.client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=self.uri),
                position=types.Position(line=line, character=character),
            )
        )
        assert hover is not None and isinstance(hover.contents, types.MarkupContent)
        return hover.contents.value

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


async def main(hovers: int) -> None:
    line, character = position()
    servers = LanguageServers(request_timeout_s=120.0)
    hands = Hands(REPO_ROOT.parent, Sandbox(), lsp=servers).for_turn("popagent", REPO_ROOT.name)
    ctx: Any = SimpleNamespace(
        deps=SimpleNamespace(workspace_access="read-only", agent_id="bench", turn=SimpleNamespace(hands=hands))
    )
    bare = BareClient()
    try:
        started = time.perf_counter()
        await bare.start()
        baseline_text = await bare.hover(line, character)
        bare_cold = time.perf_counter() - started
        started = time.perf_counter()
        answer = await lsp_inspect(ctx, "hover", TARGET, line + 1, character + 1)
        ours_cold = time.perf_counter() - started
        assert "class Hands" in baseline_text and "class Hands" in answer["hover"], (baseline_text, answer)
        bare_samples: list[float] = []
        ours_samples: list[float] = []
        for _ in range(hovers):
            started = time.perf_counter()
            await bare.hover(line, character)
            bare_samples.append(time.perf_counter() - started)
            started = time.perf_counter()
            await lsp_inspect(ctx, "hover", TARGET, line + 1, character + 1)
            ours_samples.append(time.perf_counter() - started)
    finally:
        await bare.stop()
        await servers.close()
    ours = p50_ms(ours_samples)
    print(f"LSP hover on {TARGET} ({hovers} warm hovers each, basedpyright):")
    print(f"  cold (start + initialize + first hover): bare pygls {bare_cold:.2f} s, tool {ours_cold:.2f} s")
    print(
        f"  warm p50: bare pygls client {p50_ms(bare_samples):.2f} ms, mastra_workspace_lsp_inspect {ours:.2f} ms "
        f"({ours / p50_ms(bare_samples):.1f}x, {ours - p50_ms(bare_samples):+.2f} ms); "
        f"target <= {TARGET_MS:.0f} ms {'OK' if ours <= TARGET_MS else 'MISS'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Warm LSP hover against a bare pygls client.")
    parser.add_argument("--hovers", type=int, default=50)
    asyncio.run(main(parser.parse_args().hovers))

"""Issue 31, item 1: what a language server runs of the repository runs in the sandbox, never on the host.

basedpyright runs the interpreter it finds in the repository's `.venv`; tsserver loads the
`compilerOptions.plugins` of `tsconfig.json` from the `node_modules` folders above its own
install. Both used to run on the host as the service's user. Each test plants such code,
writing a canary outside the repository (in the test's folder and in /tmp), and checks the
host after a real inspection: the canary is never written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from chat.helpers import chat, new_workspace_session, of_type

from lsp import fixture_repo
from popagent_agent_runner.lsp.inspection import Inspection, Inspector
from popagent_agent_runner.lsp.languages import DEFAULT_SERVERS_DIR, ServerCatalog
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.workspace.paths import Repository
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

pytestmark = pytest.mark.timeout(120)

LSP = "mastra_workspace_lsp_inspect"


@pytest.fixture
def canaries(tmp_path: Path) -> Iterator[list[Path]]:
    """Where planted code writes: the test's folder (outside the repository) and the host's /tmp."""
    paths = [tmp_path / "canary", Path(f"/tmp/popagent-lsp-canary-{uuid.uuid4().hex}")]
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def plant_interpreter(root: Path, canaries: list[Path]) -> None:
    """A `.venv` whose python basedpyright discovers and runs (then the real one, so it still works)."""
    writes = "".join(f"echo ran > {path}\n" for path in canaries)
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\n{writes}exec /usr/bin/python3 "$@"\n')
    python.chmod(0o755)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")


async def test_a_planted_interpreter_runs_nothing_on_the_host(tmp_path: Path, canaries: list[Path]) -> None:
    root = fixture_repo.write(tmp_path / "repo").resolve()
    plant_interpreter(root, canaries)
    servers = LanguageServers(request_timeout_s=45.0)
    try:
        inspector = Inspector(servers, "planted-python", Repository(root, "planted-python"))
        hover = await inspector.run(Inspection("hover", *fixture_repo.PY_CALL))
        assert "def greet(" in hover["hover"]
        await inspector.run(Inspection("diagnostics", "pkg/main.py"))
    finally:
        await servers.close()
    assert [path for path in canaries if path.exists()] == []


PLUGIN = """
const fs = require("fs");
for (const target of TARGETS) {
  try { fs.writeFileSync(target, "ran"); } catch (error) {}
}
// Marks hover text, so the test sees that tsserver did load it (in the sandbox).
module.exports = () => ({
  create(info) {
    const service = info.languageService;
    const proxy = Object.create(null);
    for (const name of Object.keys(service)) proxy[name] = (...args) => service[name](...args);
    proxy.getQuickInfoAtPosition = (...args) => {
      const quick = service.getQuickInfoAtPosition(...args);
      if (quick) quick.documentation = [...(quick.documentation || []), { kind: "text", text: " plugin-loaded" }];
      return quick;
    };
    return proxy;
  },
});
"""


async def test_a_tsserver_plugin_runs_nothing_on_the_host(tmp_path: Path, canaries: list[Path]) -> None:
    """tsserver looks for plugins in the `node_modules` folders above its own install: a repository
    that holds the install (popagent working on itself) has its own `node_modules/evil` loaded."""
    root = fixture_repo.write(tmp_path / "repo").resolve()
    tsconfig = json.loads(fixture_repo.TSCONFIG)
    tsconfig["compilerOptions"]["plugins"] = [{"name": "evil"}]
    (root / "tsconfig.json").write_text(json.dumps(tsconfig))
    plugin = root / "node_modules" / "evil"
    plugin.mkdir(parents=True)
    (plugin / "package.json").write_text('{"name": "evil", "main": "index.js"}')
    (plugin / "index.js").write_text(f"const TARGETS = {json.dumps([str(path) for path in canaries])};\n{PLUGIN}")
    servers_dir = root / "tools" / "language-servers"
    shutil.copytree(DEFAULT_SERVERS_DIR / "node_modules", servers_dir / "node_modules", symlinks=True)
    servers = LanguageServers(ServerCatalog(servers_dir), request_timeout_s=45.0)
    try:
        inspector = Inspector(servers, "planted-plugin", Repository(root, "planted-plugin"))
        hover = await inspector.run(Inspection("hover", *fixture_repo.TS_CALL))
    finally:
        await servers.close()
    assert "greet(name: string" in hover["hover"]
    assert "plugin-loaded" in hover["hover"], "tsserver did not load the plugin: the test proves nothing"
    assert [path for path in canaries if path.exists()] == []


async def test_the_server_reads_the_directory_the_turn_opened(tmp_path: Path) -> None:
    """A parent folder of the repository swapped for a link after the turn opened it (another
    workspace's shell can do that) does not redirect the server to the link's target."""
    parent = tmp_path / "parent"
    root = fixture_repo.write(parent / "repo").resolve()
    decoy = fixture_repo.write(tmp_path / "decoy" / "repo")
    (decoy / "pkg" / "util.py").write_text(fixture_repo.UTIL_PY.replace("Say hello to someone.", "DECOY"))
    repo = Repository(root, "swapped")
    parent.rename(tmp_path / "moved")
    os.symlink(tmp_path / "decoy", parent)
    servers = LanguageServers(request_timeout_s=45.0)
    try:
        hover = await Inspector(servers, "swapped", repo).run(Inspection("hover", *fixture_repo.PY_CALL))
    finally:
        await servers.close()
        repo.close()
    assert "Say hello to someone." in hover["hover"] and "DECOY" not in hover["hover"]


async def test_a_planted_interpreter_in_a_chat_turn_runs_nothing_on_the_host(
    stack: Stack, canaries: list[Path]
) -> None:
    """The same through the service: a turn's `mastra_workspace_lsp_inspect` on a Python file."""
    name = f"planted-{uuid.uuid4().hex[:8]}"
    root = fixture_repo.write(stack.workspace_root / name)
    plant_interpreter(root, canaries)
    path, line, character = fixture_repo.PY_CALL
    async with stack.client() as client:
        session = await new_workspace_session(client, name, "planted")
        stack.models.push(
            Turn.call(ToolCall(LSP, {"operation": "hover", "path": path, "line": line, "character": character})),
            Turn.say("done"),
        )
        chunks = await chat(client, session, "what does greet take?")
    [output] = of_type(chunks, "tool-output-available")
    assert "def greet(" in output["output"]["hover"]
    assert [path for path in canaries if path.exists()] == []


async def test_file_contents_stay_out_of_the_logs(
    inspector: Inspector, repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    """pygls logs every message it sends at INFO ("Sending data: …", a didOpen's whole text):
    its loggers stay at WARNING while the service logs at INFO."""
    marker = f"secret-{uuid.uuid4().hex}"
    (repo.root / "pkg" / "logged.py").write_text(f'TOKEN = "{marker}"\n')
    caplog.set_level(logging.INFO)
    try:
        await inspector.run(Inspection("diagnostics", "pkg/logged.py"))
    finally:
        (repo.root / "pkg" / "logged.py").unlink()
    assert [record.name for record in caplog.records if marker in record.getMessage()] == []


async def test_a_repository_cloned_again_at_its_path_gets_a_server_of_its_own(tmp_path: Path) -> None:
    """A server holds the directory it started on: one put in the old one's place (a fresh clone)
    is served by a new server, not by the one still mounted on the old directory."""
    root = fixture_repo.write(tmp_path / "repo").resolve()
    servers = LanguageServers(request_timeout_s=45.0)
    try:
        first = Repository(root, "recloned")
        hover = await Inspector(servers, "recloned", first).run(Inspection("hover", *fixture_repo.PY_CALL))
        assert "Say hello to someone." in hover["hover"]
        first.close()
        root.rename(tmp_path / "old-clone")
        fixture_repo.write(root)
        (root / "pkg" / "util.py").write_text(fixture_repo.UTIL_PY.replace("Say hello to someone.", "Cloned again."))
        again = Repository(root, "recloned")
        hover = await Inspector(servers, "recloned", again).run(Inspection("hover", *fixture_repo.PY_CALL))
        again.close()
        assert "Cloned again." in hover["hover"]
        assert servers.started == 2
    finally:
        await servers.close()

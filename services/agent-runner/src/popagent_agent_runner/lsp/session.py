"""One running language server: a pygls `LanguageClient` over the server's stdio.

The session starts the server inside the shell's sandbox (`workspace/sandbox.py`: no network,
an allow-listed environment, a pids limit, nothing of the host but read-only system folders
and the server's own program), with the repository mounted read-only from the directory
descriptor the turn holds, at its host path so that file URIs mean the same on both sides.
Whatever the server runs of the repository (an interpreter basedpyright finds in a `.venv`,
a tsserver plugin) runs there too, never on the host. It initializes the server rooted
there, answers
the requests servers make of a client (`workspace/configuration`, capability registration,
progress tokens), keeps each document the tool asked about open with the content on disk
(re-sent in full when it changed), and tells the server which of its files changed on disk
between calls: found by a walk from a descriptor of the repository held for the session's
life, never by a path re-walked from `/`, and never following a symbolic link.

Every request races the server's exit and a deadline: a server that crashed fails the request
with a clear message; the manager starts a new one for the next call (`inspection.py` makes
that call at once, once).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from popagent_agent_runner.lsp.languages import Language, LanguageServerUnavailable, ServerCommand
from popagent_agent_runner.lsp.locations import uri_of
from popagent_agent_runner.workspace.sandbox import Sandbox, SandboxProcess, SandboxUnavailable

# pygls logs every JSON-RPC message at INFO, file contents included: kept at WARNING unless
# the service's log configuration set a level for it.
if logging.getLogger("pygls").level == logging.NOTSET:
    logging.getLogger("pygls").setLevel(logging.WARNING)

T = TypeVar("T")
# Kept of a server's stderr, for the message when it fails to start or dies.
STDERR_TAIL_BYTES = 2048
# Documents one server keeps open; the least recently used is closed beyond this.
MAX_OPEN_DOCUMENTS = 64
SHUTDOWN_GRACE_S = 2.0


@dataclass
class _Document:
    version: int
    digest: str
    language_id: str
    used: float


# Folders never scanned for changed files (the servers' own excludes, roughly).
SCAN_SKIPPED = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "dist", "build"})
# Files kept and entries looked at per scan; a larger repository's further files are not watched.
MAX_SCANNED_FILES = 20_000
MAX_SCANNED_ENTRIES = 200_000
Snapshot = dict[str, tuple[int, int]]


def scan(root_fd: int, suffixes: tuple[str, ...], names: frozenset[str]) -> Snapshot:
    """(mtime, size) of the repository's files a server reads from disk (its language's and its
    config), by repository-relative path.

    Walked from `root_fd`, each folder opened from its parent's descriptor (`os.fwalk`), no
    symbolic link followed; hidden folders and dependency and build folders are skipped.
    """
    found: Snapshot = {}
    seen = 0
    # Its descriptors are closed when the walk ends or is dropped (CPython finalizes it at once).
    walker = os.fwalk(".", dir_fd=root_fd)
    for folder, folders, files, folder_fd in walker:
        seen += len(folders) + len(files)
        folders[:] = [name for name in folders if not name.startswith(".") and name not in SCAN_SKIPPED]
        for name in files:
            if not (name.endswith(suffixes) or name in names):
                continue
            try:
                st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[os.path.normpath(os.path.join(folder, name))] = (st.st_mtime_ns, st.st_size)
                if len(found) >= MAX_SCANNED_FILES:
                    return found
        if seen >= MAX_SCANNED_ENTRIES:
            break
    return found


def _ignored(params: object) -> None:
    return None


def _capabilities() -> types.ClientCapabilities:
    markup = [types.MarkupKind.Markdown, types.MarkupKind.PlainText]
    return types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(
            configuration=True,
            workspace_folders=True,
            symbol=types.WorkspaceSymbolClientCapabilities(dynamic_registration=False),
            # The session reports changed files itself (`refresh`); the server's watch
            # registrations are accepted and need nothing more.
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
        ),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(dynamic_registration=False),
            hover=types.HoverClientCapabilities(content_format=markup),
            definition=types.DefinitionClientCapabilities(link_support=True),
            implementation=types.ImplementationClientCapabilities(link_support=True),
            references=types.ReferenceClientCapabilities(),
            document_symbol=types.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
            # Diagnostics are asked for (pull): a push says nothing of whether more are to come.
            diagnostic=types.DiagnosticClientCapabilities(dynamic_registration=False, related_document_support=False),
        ),
        window=types.WindowClientCapabilities(work_done_progress=False),
    )


class ServerSession:
    def __init__(
        self, language: Language, root: Path, command: ServerCommand, *, sandbox: Sandbox, request_timeout_s: float
    ) -> None:
        self.language = language
        self.root = root
        self.command = command
        self.sandbox = sandbox
        self.request_timeout_s = request_timeout_s
        self.client = LanguageClient("popagent-agent-runner", "1")
        self.capabilities: types.ServerCapabilities | None = None
        self.last_used = time.monotonic()
        self.in_use = 0
        self._process: asyncio.subprocess.Process | None = None
        self._sandboxed: SandboxProcess | None = None
        # The repository's directory, as the server's mount holds it: every scan walks from here.
        self._root_fd: int | None = None
        self._exited: asyncio.Task[int] | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None
        self._documents: dict[str, _Document] = {}
        self._sync_lock = asyncio.Lock()
        self._snapshot: Snapshot | None = None
        self._ready = asyncio.Event()
        self._register_handlers()

    # -- the client side of the protocol ------------------------------------------------------

    def _register_handlers(self) -> None:
        client = self.client

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: types.PublishDiagnosticsParams) -> None:
            return None

        @client.feature(types.WORKSPACE_CONFIGURATION)
        def _configuration(params: types.ConfigurationParams) -> list[Any]:
            return [self._setting(item.section) for item in params.items]

        @client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def _register(params: types.RegistrationParams) -> None:
            return None

        @client.feature(types.CLIENT_UNREGISTER_CAPABILITY)
        def _unregister(params: types.UnregistrationParams) -> None:
            return None

        @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def _progress(params: types.WorkDoneProgressCreateParams) -> None:
            return None

        @client.feature(types.WINDOW_LOG_MESSAGE)
        def _log(params: types.LogMessageParams) -> None:
            ready = self.language.ready_message
            if ready is not None and ready.match(params.message):
                self._ready.set()

        @client.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(params: types.ShowMessageParams) -> None:
            return None

        @client.feature(types.TELEMETRY_EVENT)
        def _telemetry(params: object) -> None:
            return None

        # Progress notifications (basedpyright reports its analysis in its own ones).
        for method in ("pyright/beginProgress", "pyright/reportProgress", "pyright/endProgress", "$/progress"):
            client.feature(method)(_ignored)

        # typescript-language-server's own notification of the tsserver version it loaded.
        @client.feature("$/typescriptVersion")
        def _typescript_version(params: object) -> None:
            return None

    def _setting(self, section: str | None) -> Any:
        settings = self.command.settings
        if not section:
            return settings
        if section in settings:
            return settings[section]
        value: Any = settings
        for part in section.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]  # pyright: ignore[reportUnknownVariableType]
        return value  # pyright: ignore[reportUnknownVariableType]

    # -- life cycle --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None and not self.client.stopped

    def _failure(self, what: str) -> str:
        tail = self._stderr.decode(errors="replace").strip().splitlines()[-3:]
        detail = f" (stderr: {' | '.join(tail)})" if tail else ""
        return f"the {self.language.display} language server {what}{detail}"

    async def _scan(self) -> Snapshot:
        assert self._root_fd is not None
        return await asyncio.to_thread(
            scan, self._root_fd, tuple(self.language.language_ids), self.language.config_files
        )

    def _uri(self, relative: str) -> str:
        return uri_of(self.root.joinpath(*relative.split("/")))

    async def changed_on_disk(self) -> list[str]:
        """Tells the server which of its files changed on disk since the last call (agents and
        commands write them), as `workspace/didChangeWatchedFiles`; a deleted open document is
        closed. Answers the created and changed source files (repository-relative), most recent
        first: the caller
        opens them (read through the containment), which the servers take in at once, where a
        watched-file event is only taken in after their own delay."""
        current = await self._scan()
        before, self._snapshot = self._snapshot, current
        if before is None:
            return []
        created = current.keys() - before.keys()
        deleted = before.keys() - current.keys()
        changed = {path for path, seen in current.items() if path in before and before[path] != seen}
        if not (created or deleted or changed):
            return []
        events = [
            *(types.FileEvent(uri=self._uri(path), type=types.FileChangeType.Created) for path in created),
            *(types.FileEvent(uri=self._uri(path), type=types.FileChangeType.Changed) for path in changed),
            *(types.FileEvent(uri=self._uri(path), type=types.FileChangeType.Deleted) for path in deleted),
        ]
        async with self._sync_lock:
            for path in deleted:
                uri = self._uri(path)
                if self._documents.pop(uri, None) is not None:
                    self.client.text_document_did_close(
                        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
                    )
            self.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=events))
        sources = [
            path for path in created | changed if os.path.splitext(path)[1].lower() in self.language.language_ids
        ]
        sources.sort(key=lambda path: -current[path][0])
        return sources

    async def start(self, root_fd: int) -> None:
        """Start the server in the sandbox on the directory `root_fd` holds (the caller's, kept
        open by the session as its own copy) and initialize it."""
        self._root_fd = os.dup(root_fd)
        # What the server will read at start: later calls report what changed since.
        self._snapshot = await self._scan()

        async def spawn(argv: Sequence[str], **options: Any) -> asyncio.subprocess.Process:
            # pygls starts the process itself, with its stdin and stdout as the JSON-RPC stream.
            await self.client.start_io(*argv, **options)
            process = self.client._server  # pyright: ignore[reportPrivateUsage]
            assert process is not None
            return process

        try:
            self._sandboxed = await self.sandbox.start_server(
                root_fd,
                self.root,
                [self.command.program, *self.command.args],
                read_only=self.command.read_only,
                spawn=spawn,
            )
        except SandboxUnavailable as exc:
            raise LanguageServerUnavailable(self._failure(f"cannot start: {exc}")) from None
        self._process = self._sandboxed.proc
        self._exited = asyncio.create_task(self._process.wait())
        if self._process.stderr is not None:
            self._stderr_task = asyncio.create_task(self._drain(self._process.stderr))
        root_uri = uri_of(self.root)
        params = types.InitializeParams(
            # No parent to watch: in the sandbox's PID namespace this service's PID is not (or is
            # another) process, and the servers exit once they find it gone. The sandbox dies
            # with the service instead (`--die-with-parent`).
            process_id=None,
            root_uri=root_uri,
            root_path=str(self.root),
            workspace_folders=[types.WorkspaceFolder(uri=root_uri, name=self.root.name)],
            capabilities=_capabilities(),
            initialization_options=self.command.initialization_options,
        )
        try:
            result = await self.call("initialize", lambda: self.client.initialize_async(params))
        except LanguageServerUnavailable as exc:
            await self.close()
            raise LanguageServerUnavailable(f"{exc} - it failed to start") from None
        self.capabilities = result.capabilities
        self.client.initialized(types.InitializedParams())
        if self.language.ready_message is not None:
            # Until the server has found the repository's files, references miss the other files.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), self.request_timeout_s)

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        # pygls pipes stderr and never reads it: a chatty server would block on a full pipe.
        while chunk := await stream.read(4096):
            self._stderr.extend(chunk)
            del self._stderr[:-STDERR_TAIL_BYTES]

    async def call(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """One request, raced against the server's exit and the request deadline."""
        if not self.alive:
            raise LanguageServerUnavailable(self._failure(f"is not running (exit code {self._returncode()})"))
        assert self._exited is not None
        answer = asyncio.ensure_future(request())
        try:
            done, _ = await asyncio.wait(
                {answer, self._exited}, timeout=self.request_timeout_s, return_when="FIRST_COMPLETED"
            )
        except BaseException:
            answer.cancel()
            raise
        if answer in done:
            try:
                return answer.result()
            except JsonRpcException as exc:
                raise LanguageServerUnavailable(f"the {self.language.display} server refused {what}: {exc}") from None
            except RuntimeError:
                # pygls fails pending requests this way when the server exits.
                pass
        answer.cancel()
        if self._exited.done():
            raise LanguageServerUnavailable(
                self._failure(f"exited (code {self._returncode()}) during {what}; the next call starts it again")
            )
        raise LanguageServerUnavailable(self._failure(f"did not answer {what} within {self.request_timeout_s:g} s"))

    def _returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    @property
    def exit_code(self) -> int | None:
        return self._returncode()

    def exit_reason(self) -> str:
        """The last lines of the server's stderr (bubblewrap's own message when it could not start)."""
        return " | ".join(self._stderr.decode(errors="replace").strip().splitlines()[-3:])

    async def close(self) -> None:
        """Shutdown and exit, then the process group is killed whatever it did."""
        process = self._process
        if process is not None and process.returncode is None and not self.client.stopped:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.shutdown_async(None), SHUTDOWN_GRACE_S)
                self.client.exit(None)
                await asyncio.wait_for(process.wait(), SHUTDOWN_GRACE_S)
        if self._sandboxed is not None:
            # bubblewrap's process group and the sandbox's PID 1: the server's children (tsserver)
            # die with its PID namespace.
            self._sandboxed.kill()
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.stop(), SHUTDOWN_GRACE_S)
        for task in (self._stderr_task, self._exited):
            if task is not None and not task.done():
                task.cancel()

    # -- documents ---------------------------------------------------------------------------

    async def sync(self, path: Path, text: str) -> tuple[str, bool]:
        """Opens `path` with `text`, or re-sends it if it changed; (uri, whether anything was sent)."""
        uri = uri_of(path)
        digest = hashlib.sha256(text.encode()).hexdigest()
        async with self._sync_lock:
            known = self._documents.get(uri)
            if known is not None and known.digest == digest:
                known.used = time.monotonic()
                return uri, False
            if known is None:
                language_id = self.language.language_id(path.name)
                self._close_least_used()
                self._documents[uri] = _Document(1, digest, language_id, time.monotonic())
                self.client.text_document_did_open(
                    types.DidOpenTextDocumentParams(
                        text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)
                    )
                )
            else:
                known.version += 1
                known.digest = digest
                known.used = time.monotonic()
                self.client.text_document_did_change(
                    types.DidChangeTextDocumentParams(
                        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=known.version),
                        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                    )
                )
            return uri, True

    def _close_least_used(self) -> None:
        while len(self._documents) >= MAX_OPEN_DOCUMENTS:
            uri = min(self._documents, key=lambda known: self._documents[known].used)
            del self._documents[uri]
            self.client.text_document_did_close(
                types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )

    @property
    def has_documents(self) -> bool:
        return bool(self._documents)

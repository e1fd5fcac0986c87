"""One running language server: a pygls `LanguageClient` over the server's stdio.

The session starts the server in the repository's real directory (its own process group,
an environment without the service's credentials), initializes it rooted there, answers
the requests servers make of a client (`workspace/configuration`, capability registration,
progress tokens), keeps the diagnostics the server pushes, and keeps each document the
tool asked about open with the content on disk (re-sent in full when it changed).

Every request races the server's exit and a deadline: a server that crashed fails the call
with a clear message, and the manager starts a new one on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from popagent_agent_runner.lsp.languages import Language, LanguageServerUnavailable, ServerCommand, server_environment
from popagent_agent_runner.lsp.locations import uri_of

logger = logging.getLogger(__name__)

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


@dataclass
class _Published:
    seq: int
    version: int | None
    diagnostics: list[types.Diagnostic]


def _ignored(params: object) -> None:
    return None


def _capabilities() -> types.ClientCapabilities:
    markup = [types.MarkupKind.Markdown, types.MarkupKind.PlainText]
    return types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(
            configuration=True,
            workspace_folders=True,
            symbol=types.WorkspaceSymbolClientCapabilities(dynamic_registration=False),
        ),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(dynamic_registration=False),
            hover=types.HoverClientCapabilities(content_format=markup),
            definition=types.DefinitionClientCapabilities(link_support=True),
            implementation=types.ImplementationClientCapabilities(link_support=True),
            references=types.ReferenceClientCapabilities(),
            document_symbol=types.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        ),
        window=types.WindowClientCapabilities(work_done_progress=False),
    )


class ServerSession:
    def __init__(self, language: Language, root: Path, command: ServerCommand, *, request_timeout_s: float) -> None:
        self.language = language
        self.root = root
        self.command = command
        self.request_timeout_s = request_timeout_s
        self.client = LanguageClient("popagent-agent-runner", "1")
        self.capabilities: types.ServerCapabilities | None = None
        self.last_used = time.monotonic()
        self.in_use = 0
        self._process: asyncio.subprocess.Process | None = None
        self._exited: asyncio.Task[int] | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task[None] | None = None
        self._documents: dict[str, _Document] = {}
        self._published: dict[str, _Published] = {}
        self._seq = 0
        self._publish_signal = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self._register_handlers()

    # -- the client side of the protocol ------------------------------------------------------

    def _register_handlers(self) -> None:
        client = self.client

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(params: types.PublishDiagnosticsParams) -> None:
            self._seq += 1
            self._published[params.uri] = _Published(self._seq, params.version, list(params.diagnostics))
            signal_, self._publish_signal = self._publish_signal, asyncio.Event()
            signal_.set()

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
            return None

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

    async def start(self) -> None:
        try:
            await self.client.start_io(
                self.command.program,
                *self.command.args,
                cwd=str(self.root),
                env=server_environment(),
                start_new_session=True,
            )
        except OSError as exc:
            raise LanguageServerUnavailable(self._failure(f"failed to start: {exc.strerror or exc}")) from None
        self._process = self.client._server  # pyright: ignore[reportPrivateUsage]
        assert self._process is not None
        self._exited = asyncio.create_task(self._process.wait())
        if self._process.stderr is not None:
            self._stderr_task = asyncio.create_task(self._drain(self._process.stderr))
        root_uri = uri_of(self.root)
        params = types.InitializeParams(
            process_id=os.getpid(),
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

    async def close(self) -> None:
        """Shutdown and exit, then the process group is killed whatever it did."""
        process = self._process
        if process is not None and process.returncode is None and not self.client.stopped:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.shutdown_async(None), SHUTDOWN_GRACE_S)
                self.client.exit(None)
                await asyncio.wait_for(process.wait(), SHUTDOWN_GRACE_S)
        if process is not None:
            # The server's own children too (tsserver): the server leads its process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.stop(), SHUTDOWN_GRACE_S)
        for task in (self._stderr_task, self._exited):
            if task is not None and not task.done():
                task.cancel()

    # -- documents and diagnostics -----------------------------------------------------------

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
            self._published.pop(uri, None)
            self.client.text_document_did_close(
                types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )

    @property
    def has_documents(self) -> bool:
        return bool(self._documents)

    def published_seq(self) -> int:
        return self._seq

    async def diagnostics(self, uri: str, *, since: int | None, timeout_s: float) -> list[types.Diagnostic]:
        """The diagnostics of `uri` published after `since` (None: the last published, if any)."""
        version = self._documents[uri].version if uri in self._documents else None
        deadline = time.monotonic() + timeout_s
        while True:
            published = self._published.get(uri)
            if (
                published is not None
                and (since is None or published.seq > since)
                and (published.version is None or version is None or published.version >= version)
            ):
                return published.diagnostics
            if not self.alive:
                raise LanguageServerUnavailable(
                    self._failure(f"exited (code {self._returncode()}); the next call starts it again")
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LanguageServerUnavailable(
                    f"the {self.language.display} server published no diagnostics within {timeout_s:g} s"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._publish_signal.wait(), min(remaining, 0.5))

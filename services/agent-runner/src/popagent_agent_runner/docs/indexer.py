"""Incremental, resumable indexing of a workspace's documentation, in the background.

A run walks the workspace (contained: every path is opened from the repository's root
descriptor, no symbolic link followed, `.git` and whatever `.gitignore` ignores left out),
takes the files the include globs match and the exclude globs do not, and compares each
file's sha256 with what its stored chunks were made from. Only new and changed files are
chunked and embedded; documents of files that are gone are removed. Each embedding batch of
files is written with its chunks in one transaction and the run's progress moves with it, so
a run stopped anywhere (the service stopped, the machine rebooted) leaves a consistent index:
its state stays `running` and the next start runs it again, which embeds only what is still
missing. A run that fails for any other reason (a workspace the walk cannot read, a glob RE2
refuses, a bug) ends `failed` with the reason, never left `running`.

One run per workspace at a time across every agent-runner worker (a session advisory lock);
a run asked for while one is going is taken up when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popagent_agent_runner.docs.chunking import chunk_markdown, embedding_text, sections
from popagent_agent_runner.docs.store import DocsStore, EmbeddedDocument, IndexRecord
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, contained_path
from popagent_agent_runner.workspace import gitignore, patterns
from popagent_agent_runner.workspace.files import WALK_MAX_DEPTH, read_small_file, walk_tree
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from popagent_core.errors import FailedPrecondition, InvalidArgument, PopagentError

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 1024 * 1024
"""A bigger Markdown file is left out (it is generated, not written)."""
MAX_GLOBS = 32
MAX_GLOB_CHARS = 200
EMBED_BATCH_CHUNKS = 256
"""Chunks gathered from consecutive files into one `embed` call (which sends them in gateway-sized batches)."""


@dataclass(frozen=True, slots=True)
class ScannedFile:
    path: str
    text: str
    content_hash: str


def check_globs(globs: Sequence[str], what: str) -> tuple[str, ...]:
    if len(globs) > MAX_GLOBS:
        raise InvalidArgument(f"{what}: at most {MAX_GLOBS} globs")
    for glob in globs:
        if not glob or len(glob) > MAX_GLOB_CHARS or glob.startswith("/") or "\x00" in glob or ".." in glob.split("/"):
            raise InvalidArgument(
                f"{what}: {glob[:60]!r} must be a relative path glob of 1 to {MAX_GLOB_CHARS} characters without '..'"
            )
        _glob_regex(glob, what)
    return tuple(globs)


def _glob_regex(glob: str, what: str) -> patterns.Regex:
    try:
        return gitignore.glob_regex(glob)
    except patterns.PatternError as exc:
        raise InvalidArgument(f"{what}: {glob[:60]!r} is not a glob that can be matched ({exc})") from None


def document_title(path: str, text: str) -> str:
    """The first heading with none above it, else the file name."""
    for heading_path, _ in sections(text):
        if len(heading_path) == 1:
            return heading_path[0][:500]
    return path.rsplit("/", 1)[-1][:500]


def scan(repo: Repository, include: Sequence[str], exclude: Sequence[str]) -> list[ScannedFile]:
    """The workspace's files to index, in path order (blocking: run it in a thread)."""
    included = [_glob_regex(glob, "include") for glob in include]
    excluded = [_glob_regex(glob, "exclude") for glob in exclude]
    found: list[ScannedFile] = []
    with repo.root_fd() as root:
        # Folders deeper than WALK_MAX_DEPTH levels are not walked (a bound, not a failure).
        for parts, item, parent_fd in walk_tree(root, (), [], WALK_MAX_DEPTH):
            if not item.is_file(follow_symlinks=False):
                continue
            path = "/".join(parts)
            if not any(regex.fullmatch(path) for regex in included):
                continue
            if any(regex.fullmatch(path) for regex in excluded):
                continue
            data = _read_small(item.name, parent_fd)
            if data is None:
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            found.append(ScannedFile(path, text, hashlib.sha256(data).hexdigest()))
    return found


def _read_small(name: str, parent_fd: int) -> bytes | None:
    data = read_small_file(name, parent_fd, MAX_DOCUMENT_BYTES)
    return None if data is None or b"\x00" in data else data


async def embed_documents(
    retrieval: GatewayRetrieval, model: str, files: Sequence[tuple[str, str, str, str]]
) -> list[EmbeddedDocument]:
    """(path, title, content, hash) of each document → its chunks and their vectors, in one `embed` call."""
    chunked = [(path, title, content, digest, chunk_markdown(content)) for path, title, content, digest in files]
    texts = [embedding_text(path, chunk) for path, _, _, _, chunks in chunked for chunk in chunks]
    vectors = (await retrieval.embed(model, texts)).vectors if texts else []
    documents: list[EmbeddedDocument] = []
    start = 0
    for path, title, content, digest, chunks in chunked:
        documents.append(EmbeddedDocument(path, title, content, digest, chunks, vectors[start : start + len(chunks)]))
        start += len(chunks)
    return documents


@dataclass(kw_only=True, eq=False)
class DocsIndexer:
    store: DocsStore
    workspaces: AgentWorkspaceStore
    workspace_root: Path
    retrieval: GatewayRetrieval
    embedding_model: str
    _runs: dict[str, asyncio.Task[None]] = field(default_factory=dict[str, "asyncio.Task[None]"], init=False)
    _again: set[str] = field(default_factory=set[str], init=False)

    def require_model(self) -> str:
        if not self.embedding_model:
            raise FailedPrecondition(
                "documentation search is off: no embedding model is configured (POPAGENT_DOCS_EMBEDDING_MODEL)"
            )
        return self.embedding_model

    async def request(
        self, workspace_id: str, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None
    ) -> IndexRecord:
        """Queue a run of the workspace's index (globs given replace the stored ones) and start it here."""
        self.require_model()
        await self.workspaces.get(workspace_id)  # NotFound for an unknown workspace
        if include is not None:
            include = check_globs(include, "include")
            if not include:
                raise InvalidArgument("include: at least one glob")
        if exclude is not None:
            exclude = check_globs(exclude, "exclude")
        record = await self.store.request_index(workspace_id, include, exclude)
        self._start(workspace_id)
        return record

    async def resume(self) -> list[str]:
        """Start every run a previous process queued or left running; the workspaces resumed."""
        if not self.embedding_model:
            return []
        pending = await self.store.pending()
        for workspace_id in pending:
            self._start(workspace_id)
        return pending

    def running(self, workspace_id: str) -> bool:
        task = self._runs.get(workspace_id)
        return task is not None and not task.done()

    def _start(self, workspace_id: str) -> None:
        if self.running(workspace_id):
            # The run going takes the new request up when it ends (finish_run answers queued; the
            # mark covers a request that came after that answer, before the task ended).
            self._again.add(workspace_id)
            return
        task = asyncio.create_task(self._run_while_queued(workspace_id), name=f"docs-index-{workspace_id}")
        self._runs[workspace_id] = task
        task.add_done_callback(functools.partial(self._forget, workspace_id))

    def _forget(self, workspace_id: str, task: asyncio.Task[None]) -> None:
        if self._runs.get(workspace_id) is task:
            del self._runs[workspace_id]

    async def _run_while_queued(self, workspace_id: str) -> None:
        try:
            while True:
                self._again.discard(workspace_id)
                async with self.store.run_lock(workspace_id) as mine:
                    if not mine:
                        return  # another worker runs it (and takes a later request up when it ends)
                    state = await self._run_once(workspace_id)
                # No await between this check and the task's end: a request cannot slip in between.
                if state != "queued" and workspace_id not in self._again:
                    return
        except PopagentError as exc:
            logger.warning("documentation index run failed", extra={"workspace": workspace_id, "error": str(exc)})

    async def _run_once(self, workspace_id: str) -> str:
        model = self.require_model()
        include, exclude, requested_at = await self.store.start_run(workspace_id, model)
        try:
            repo = await self._repository(workspace_id)
            files = await asyncio.to_thread(scan, repo, include, exclude)
            stored = await self.store.file_states(workspace_id)
            present = {file.path for file in files}
            removed = [state.id for path, state in stored.items() if path not in present]
            changed = [
                file
                for file in files
                if (state := stored.get(file.path)) is None
                or not (state.embedded_hash == file.content_hash and state.embedded_model == model)
            ]
            await self.store.remove(workspace_id, removed)
            await self.store.run_planned(workspace_id, len(files), len(changed), len(removed))
            for batch in _batches(changed):
                documents = await embed_documents(
                    self.retrieval,
                    model,
                    [(file.path, document_title(file.path, file.text), file.text, file.content_hash) for file in batch],
                )
                await self.store.store_files(workspace_id, model, documents)
        except (PopagentError, WorkspaceRefusal) as exc:
            await self.store.fail_run(workspace_id, str(exc))
            return "failed"
        except Exception as exc:
            # Whatever else went wrong (the file system, a bug): the run ends failed, saying so,
            # rather than staying `running` with no error until the next start retries it.
            logger.exception("documentation index run failed", extra={"workspace": workspace_id})
            await self.store.fail_run(workspace_id, f"indexing failed: {type(exc).__name__}: {str(exc)[:300]}")
            return "failed"
        return await self.store.finish_run(workspace_id, requested_at)

    async def _repository(self, workspace_id: str) -> Repository:
        workspace = await self.workspaces.get(workspace_id)
        _, real = contained_path(self.workspace_root, workspace.path)
        return Repository(real, workspace_id)

    async def close(self) -> None:
        """Stop every run (each stays `running`, so the next start resumes it)."""
        tasks = list(self._runs.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _batches(files: Iterable[ScannedFile]) -> Iterable[list[ScannedFile]]:
    batch: list[ScannedFile] = []
    size = 0
    for file in files:
        batch.append(file)
        # A rough chunk count (the chunker decides): enough files to fill the embedding batches.
        size += 1 + len(file.text) // 1200
        if size >= EMBED_BATCH_CHUNKS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch

"""Repository-relative paths, resolved one component at a time from an open directory.

A path the model gives is split into components and walked from a file descriptor of the
repository root: each directory is opened with `O_DIRECTORY | O_NOFOLLOW` relative to the
one before it (`dir_fd`), so no string is ever joined onto the root and re-resolved by the
kernel. A symbolic link met on the way is read (`readlink` at its directory) and its
target's components are walked in its place: an absolute target, or a `..` that would
climb above the root, is refused; a `..` inside the repository pops the walk's own stack of
open directories instead of opening `..`. A link swapped in after a check cannot redirect
the walk: every step is taken from a descriptor already held, never from a path name.

The repository root itself is such a descriptor (`Repository`): opened once when the turn's
hands are made, without following any link on its way from `/`, and held until the turn
ends, so the whole turn works on the directory that was checked then.

The result (`Entry`) is the open parent directory, the leaf's name in it and the canonical
components (links resolved), which are what `.git` protection and the read ledger compare
- by components, never by string prefix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import unicodedata
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Like the kernel's own limit for one path walk.
MAX_SYMLINK_HOPS = 40
MAX_PATH_CHARS = 4096
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
GIT_DIR = ".git"


class WorkspaceRefusal(Exception):
    """A workspace tool call refused; the message is what the model reads."""


def split_relative(raw: str, *, allow_root: bool = False) -> tuple[str, ...]:
    """The components of a repository-relative path, or a refusal.

    Absolute paths, `..`, `~`, backslashes and control characters are refused; empty and
    `.` components are dropped. `allow_root`: "" and "." name the repository root.
    """
    if len(raw) > MAX_PATH_CHARS:
        raise WorkspaceRefusal(f"path is longer than {MAX_PATH_CHARS} characters")
    if any(unicodedata.category(char) == "Cc" for char in raw):
        raise WorkspaceRefusal("path must not contain control characters")
    if raw.startswith("/"):
        raise WorkspaceRefusal(
            f"{raw!r} is an absolute path; workspace paths are relative to the repository root (e.g. 'src/app.py')"
        )
    if "\\" in raw:
        raise WorkspaceRefusal("path must use '/' as its separator, not '\\'")
    parts = tuple(part for part in raw.split("/") if part not in ("", "."))
    if ".." in parts:
        raise WorkspaceRefusal(f"{raw!r} contains '..'; workspace paths stay inside the repository")
    if parts and parts[0].startswith("~"):
        raise WorkspaceRefusal(f"{raw!r} starts with '~'; workspace paths are relative to the repository root")
    if not parts and not allow_root:
        raise WorkspaceRefusal("path names the repository root itself; name a file or folder inside it")
    return parts


def display(parts: tuple[str, ...]) -> str:
    return "/".join(parts) or "."


def touches_git(parts: tuple[str, ...]) -> bool:
    return GIT_DIR in parts


@dataclass
class Entry:
    """A resolved leaf: `parent_fd` is open (closed with the entry), `st` is None when it does not exist."""

    parent_fd: int
    name: str
    parts: tuple[str, ...]
    st: os.stat_result | None
    _owned: list[int] = field(default_factory=list[int])

    @property
    def path(self) -> str:
        return display(self.parts)

    def close(self) -> None:
        for fd in self._owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owned.clear()


class _Walk:
    """A stack of open directories from the root down; `names` are their components."""

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.names: list[str] = []

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def push(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def pop(self, shown: str) -> None:
        if not self.names:
            raise WorkspaceRefusal(f"{shown} resolves outside the repository (a symbolic link climbs above its root)")
        os.close(self.fds.pop())
        self.names.pop()

    def close_all(self, keep: int | None = None) -> list[int]:
        """Closes every descriptor but the root's and `keep`; returns the kept one as owned."""
        kept: list[int] = []
        for fd in self.fds[1:]:
            if fd == keep:
                kept.append(fd)
            else:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds = self.fds[:1]
        return kept


def _link_target(name: str, dir_fd: int, shown: str) -> list[str]:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return []
    if target.startswith("/"):
        raise WorkspaceRefusal(
            f"{shown} is a symbolic link to an absolute path ({target}); it leads outside the repository"
        )
    return [part for part in target.split("/") if part not in ("", ".")] or ["."]


def walk(
    root_fd: int, parts: tuple[str, ...], *, leaf: bool, follow_last: bool = True, create_dirs: bool = False
) -> Entry:
    """Resolve `parts` under `root_fd` (which stays the caller's).

    `leaf=False`: the whole path must be a directory; the entry's `parent_fd` is that
    directory and `name` is "". `leaf=True`: every component but the last is a directory;
    the last is looked up in it (`st` from `lstat`), following a final symbolic link when
    `follow_last`. `create_dirs` makes missing directories on the way.
    """
    shown = display(parts)
    state = _Walk(root_fd)
    pending = list(parts)
    hops = 0
    try:
        while True:
            if not pending:
                if not leaf:
                    owned = state.close_all(keep=state.fd)
                    fd = owned[0] if owned else os.dup(root_fd)
                    return Entry(fd, "", tuple(state.names), os.fstat(fd), [fd])
                # The path ended on a directory reached through `..` or a link to a directory:
                # the leaf is that directory, looked up in its parent.
                if not state.names:
                    fd = os.dup(root_fd)
                    return Entry(fd, "", (), os.fstat(fd), [fd])
                name = state.names[-1]
                state.pop(shown)
                pending = [name]
                follow_last = False
            name = pending.pop(0)
            if name == "..":
                state.pop(shown)
                continue
            if name == ".":
                continue
            if leaf and not pending:
                try:
                    st = os.stat(name, dir_fd=state.fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                except NotADirectoryError:
                    raise WorkspaceRefusal(f"{shown}: a component of the path is not a directory") from None
                if st is not None and stat.S_ISLNK(st.st_mode) and follow_last:
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise WorkspaceRefusal(f"{shown}: too many levels of symbolic links")
                    pending = _link_target(name, state.fd, shown) + pending
                    continue
                owned = state.close_all(keep=state.fd)
                fd = owned[0] if owned else os.dup(root_fd)
                return Entry(fd, name, (*state.names, name), st, [fd])
            try:
                fd = os.open(name, DIRECTORY_FLAGS, dir_fd=state.fd)
            except FileNotFoundError:
                if not create_dirs:
                    raise WorkspaceRefusal(f"{shown}: no such directory {display((*state.names, name))!r}") from None
                if touches_git((*state.names, name)):
                    raise WorkspaceRefusal(f"{shown}: .git internals are read-only to the workspace tools") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=state.fd)
                fd = os.open(name, DIRECTORY_FLAGS, dir_fd=state.fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _link_target(name, state.fd, shown)
                if not target:
                    raise WorkspaceRefusal(f"{shown}: {display((*state.names, name))!r} is not a directory") from None
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkspaceRefusal(f"{shown}: too many levels of symbolic links") from None
                pending = target + pending
                continue
            state.push(fd, name)
    except BaseException:
        state.close_all()
        raise


class Repository:
    """One registered repository's directory, held open from construction to `close()`.

    The directory is opened once, one component at a time from `/` with `O_NOFOLLOW`, so a
    symbolic link anywhere on the way (one swapped into a parent folder since the path was
    resolved) is refused rather than followed. Every later open starts from that descriptor:
    a parent folder renamed or replaced by a link during the turn changes nothing the tools
    reach. `root` stays the path it was opened by, for messages and for what still needs a
    path (language servers).
    """

    def __init__(self, root: Path, workspace_id: str = "") -> None:
        self.root = root
        self.workspace_id = workspace_id
        # abspath only joins and normalizes; it resolves no link.
        fd = self._open_without_links(Path(os.path.abspath(root)))
        self._fd: int | None = fd
        self._lock = threading.Lock()
        # Closes the descriptor exactly once: at `close()`, or when the repository is dropped
        # unclosed (a caller that never ends a turn does not leak it).
        self._release = weakref.finalize(self, os.close, fd)

    def _name(self) -> str:
        return self.workspace_id or self.root.name

    def _open_without_links(self, root: Path) -> int:
        fd = os.open("/", DIRECTORY_FLAGS)
        try:
            for depth, part in enumerate(root.parts[1:], start=1):
                try:
                    child = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    raise WorkspaceRefusal(
                        f"the workspace {self._name()!r} has no directory: {root} "
                        "does not exist (clone or register the repository again)"
                    ) from None
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise WorkspaceRefusal(
                            f"the workspace directory {root} cannot be used: {Path(*root.parts[: depth + 1])} "
                            "is a symbolic link or not a folder (it changed since the path was checked)"
                        ) from None
                    raise WorkspaceRefusal(f"the workspace directory {root} cannot be opened: {exc.strerror}") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def root_fd(self) -> Iterator[int]:
        """A descriptor of the repository's directory, the caller's until the block ends.

        It is a new open of `.` in the held directory, never a walk from `/`: its own file
        offset (concurrent listings do not interleave) and closing it touches no one else's.
        """
        with self._lock:
            if self._fd is None:
                raise WorkspaceRefusal(f"the workspace {self._name()!r} is closed: the turn that opened it has ended")
            fd = os.open(".", DIRECTORY_FLAGS, dir_fd=self._fd)
        try:
            if os.fstat(fd).st_nlink == 0:
                raise WorkspaceRefusal(
                    f"the workspace {self._name()!r} has no directory: {self.root} "
                    "was removed (clone or register the repository again)"
                )
            yield fd
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the held directory (idempotent); later calls are refused."""
        with self._lock:
            self._fd = None
            self._release()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def entry(
        self, raw: str, *, follow_last: bool = True, create_dirs: bool = False, allow_root: bool = False
    ) -> Iterator[Entry]:
        parts = split_relative(raw, allow_root=allow_root)
        with self.root_fd() as root:
            found = walk(root, parts, leaf=True, follow_last=follow_last, create_dirs=create_dirs)
            try:
                yield found
            finally:
                found.close()

    @contextlib.contextmanager
    def directory(self, raw: str, *, create: bool = False) -> Iterator[Entry]:
        parts = split_relative(raw, allow_root=True)
        with self.root_fd() as root:
            found = walk(root, parts, leaf=False, create_dirs=create)
            try:
                yield found
            finally:
                found.close()

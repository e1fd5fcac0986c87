"""The file operations behind the workspace tools, every one contained by `paths.walk`.

They are blocking (system calls on descriptors) and run in a worker thread. Each takes a
`Repository` and repository-relative paths and returns a frozen record; a refusal is a
`WorkspaceRefusal` whose text the model reads.

- Files are opened with `O_NOFOLLOW | O_NONBLOCK` from their parent's descriptor and must
  be regular files (a FIFO or device never blocks a tool).
- Writes are atomic: a temporary file beside the target (`O_EXCL`), written and synced,
  given the target's mode, then renamed over it within the same directory descriptor.
- `.git` internals (any component named `.git`, links resolved) are read-only.
- Listings and grep walk directory descriptors and never follow a symbolic link, so no
  result can be reached through a link; each result's components are checked once more
  before it is returned.
- Read before write: reads return the content's SHA-256; writing or editing an existing
  file requires the hash the caller recorded at its read to still match (`read_hashes`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import errno
import functools
import hashlib
import mimetypes
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from popagent_agent_runner.workspace import gitignore, patterns
from popagent_agent_runner.workspace.paths import (
    DIRECTORY_FLAGS,
    GIT_DIR,
    Entry,
    Repository,
    WorkspaceRefusal,
    display,
    split_relative,
    touches_git,
)

READ_MAX_LINES = 2000
READ_MAX_BYTES = 256 * 1024
# A file larger than this is not read whole (for its hash and lines); grep skips it.
MAX_FILE_BYTES = 16 * 1024 * 1024
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192
MAX_DIFF_CHARS = 64 * 1024
LIST_MAX_ENTRIES = 1000
LIST_MAX_DEPTH = 10
GREP_MAX_MATCHES = 500
GREP_MAX_LINE_CHARS = 400
GREP_MAX_FILES = 50_000
# Folders below this many levels are not walked (grep, documentation indexing): a bound on the
# descriptors a walk holds open, far beyond any real source tree.
WALK_MAX_DEPTH = 128
# An include glob's `{a,b}` alternatives multiply: `{a,b}{a,b}…` of 500 characters is 2^100 globs.
MAX_INCLUDE_GLOBS = 256
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHANGED_SINCE_READ = "changed since you read it; read it again"

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"%PDF", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x7fELF", "application/x-executable"),
    (b"\x1f\x8b", "application/gzip"),
)


P = ParamSpec("P")
R = TypeVar("R")


def refusing_os_errors(operation: Callable[P, R]) -> Callable[P, R]:
    """A system call that fails mid-operation (an entry removed or replaced concurrently) is a
    refusal the model reads, like every other, not an internal error."""

    @functools.wraps(operation)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return operation(*args, **kwargs)
        except OSError as exc:
            raise WorkspaceRefusal(
                f"{exc.strerror or exc}; the file system changed during the call, try again"
            ) from None

    return run


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _refuse_git(parts: tuple[str, ...], what: str) -> None:
    if touches_git(parts):
        raise WorkspaceRefusal(
            f"{display(parts)}: .git internals are read-only to the workspace tools ({what} refused)"
        )


def _content_type(name: str, head: bytes) -> str:
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def is_binary(head: bytes) -> bool:
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


def _read_regular(entry: Entry, limit: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The whole content of a regular file entry (opened without following a link)."""
    if entry.st is None:
        raise WorkspaceRefusal(f"{entry.path}: no such file")
    if stat.S_ISDIR(entry.st.st_mode):
        raise WorkspaceRefusal(f"{entry.path} is a directory; use mastra_workspace_list_files")
    try:
        fd = os.open(entry.name, FILE_FLAGS, dir_fd=entry.parent_fd)
    except FileNotFoundError:
        raise WorkspaceRefusal(f"{entry.path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WorkspaceRefusal(f"{entry.path} changed into a symbolic link while being opened; try again") from None
        raise WorkspaceRefusal(f"{entry.path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceRefusal(f"{entry.path} is not a regular file")
        if st.st_size > limit:
            raise WorkspaceRefusal(
                f"{entry.path} is {st.st_size} bytes, more than the {limit} a workspace tool reads; "
                "use mastra_workspace_grep or a command"
            )
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise WorkspaceRefusal(f"{entry.path} grew beyond {limit} bytes while being read")
        return data, st
    finally:
        os.close(fd)


# --- read ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadResult:
    path: str
    content: str
    start_line: int
    end_line: int
    total_lines: int
    sha256: str
    # The line to continue at, when the output was cut (0: the whole requested range is shown).
    next_line: int = 0


@refusing_os_errors
def read_file(repo: Repository, raw: str, offset: int = 1, limit: int | None = None) -> ReadResult:
    with repo.entry(raw) as entry:
        data, _ = _read_regular(entry)
        path = entry.path
    if is_binary(data) or not _decodes(data):
        raise WorkspaceRefusal(
            f"{path} is a binary file ({_content_type(path, data[:16])}, {len(data)} bytes); it is not shown as text"
        )
    lines = data.decode().splitlines()
    total = len(lines)
    start = max(offset, 1)
    if total and start > total:
        raise WorkspaceRefusal(f"{path} has {total} lines; offset {start} is past its end")
    wanted = min(limit or READ_MAX_LINES, READ_MAX_LINES)
    out: list[str] = []
    size = 0
    line_no = start
    next_line = 0
    while line_no <= total and len(out) < wanted:
        text = lines[line_no - 1]
        numbered = f"{line_no:>6}\t{text}\n"
        if size + len(numbered.encode()) > READ_MAX_BYTES:
            if not out:
                # One line longer than a call's budget: show its start.
                out.append(numbered.encode()[:READ_MAX_BYTES].decode(errors="ignore") + " …(line cut)\n")
                line_no += 1
            break
        out.append(numbered)
        size += len(numbered.encode())
        line_no += 1
    end = line_no - 1
    if line_no <= total and (limit is None or len(out) < limit):
        next_line = line_no
    content = "".join(out)
    if next_line:
        content += f"\n(truncated, continue at line {next_line})\n"
    return ReadResult(path, content, start, end, total, sha256(data), next_line)


def _decodes(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


# --- write and edit -------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteResult:
    path: str
    created: bool
    bytes: int
    sha256: str
    diff: str


def unified_diff(path: str, before: str, after: str) -> str:
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
        )
    )
    return diff if len(diff) <= MAX_DIFF_CHARS else diff[:MAX_DIFF_CHARS] + "\n…(diff cut)\n"


def _check_read(entry: Entry, current: bytes, read_hashes: Mapping[str, str]) -> None:
    recorded = read_hashes.get(entry.path)
    if recorded is None:
        raise WorkspaceRefusal(
            f"{entry.path} exists; read it with mastra_workspace_read_file before overwriting or editing it"
        )
    if recorded != sha256(current):
        raise WorkspaceRefusal(f"{entry.path} {CHANGED_SINCE_READ}")


def _atomic_write(entry: Entry, data: bytes) -> None:
    """Replace (or create) the entry's file atomically, keeping an existing file's mode and owner."""
    tmp = f".{entry.name[:200]}.popagent-{secrets.token_hex(6)}.tmp"
    mode = stat.S_IMODE(entry.st.st_mode) if entry.st is not None else 0o666
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=entry.parent_fd
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if entry.st is not None:
                os.fchmod(fd, mode)
                if (entry.st.st_uid, entry.st.st_gid) != (os.getuid(), os.getgid()):
                    with contextlib.suppress(PermissionError):
                        os.fchown(fd, entry.st.st_uid, entry.st.st_gid)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(fd, mode & ~umask)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, entry.name, src_dir_fd=entry.parent_fd, dst_dir_fd=entry.parent_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=entry.parent_fd)
        raise


def _writable_entry(entry: Entry, what: str) -> None:
    _refuse_git(entry.parts, what)
    if entry.st is not None and not stat.S_ISREG(entry.st.st_mode):
        kind = "a directory" if stat.S_ISDIR(entry.st.st_mode) else "not a regular file"
        raise WorkspaceRefusal(f"{entry.path} is {kind}; only regular files are written")


@refusing_os_errors
def write_file(repo: Repository, raw: str, content: str, read_hashes: Mapping[str, str]) -> WriteResult:
    data = content.encode()
    if len(data) > MAX_FILE_BYTES:
        raise WorkspaceRefusal(f"content is {len(data)} bytes, more than the {MAX_FILE_BYTES} a write takes")
    _refuse_git(split_relative(raw), "write")
    with repo.entry(raw, create_dirs=True) as entry:
        _writable_entry(entry, "write")
        before = ""
        if entry.st is not None:
            current, _ = _read_regular(entry)
            _check_read(entry, current, read_hashes)
            before = current.decode(errors="replace")
        _atomic_write(entry, data)
        return WriteResult(
            entry.path, entry.st is None, len(data), sha256(data), unified_diff(entry.path, before, content)
        )


@refusing_os_errors
def create_file(repo: Repository, raw: str, data: bytes) -> str:
    """A new file holding `data` (a user's attachment copied in): never over an existing path.

    Contained as every write is (no link followed, `.git` read-only, the disk budget's size bound)."""
    if len(data) > MAX_FILE_BYTES:
        raise WorkspaceRefusal(f"the file is {len(data)} bytes, more than the {MAX_FILE_BYTES} a write takes")
    _refuse_git(split_relative(raw), "write")
    with repo.entry(raw, create_dirs=True) as entry:
        _writable_entry(entry, "write")
        if entry.st is not None:
            raise WorkspaceRefusal(f"{entry.path} already exists; choose another path")
        _atomic_write(entry, data)
        return entry.path


@dataclass(frozen=True)
class EditResult:
    path: str
    replacements: int
    sha256: str
    diff: str


def _closest_lines(text: str, old: str) -> str:
    lines = text.splitlines()
    wanted = old.splitlines() or [old]
    first = wanted[0].strip()
    best, best_ratio = 0, -1.0
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(first)
    for index, line in enumerate(lines[:20_000]):
        matcher.set_seq1(line.strip())
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best, best_ratio = index, ratio
    window = lines[best : best + max(len(wanted), 1) + 2]
    return "\n".join(f"{best + 1 + i:>6}\t{line}" for i, line in enumerate(window))


@refusing_os_errors
def edit_file(
    repo: Repository, raw: str, old: str, new: str, replace_all: bool, read_hashes: Mapping[str, str]
) -> EditResult:
    if not old:
        raise WorkspaceRefusal("old_string is empty; to create or overwrite a file use mastra_workspace_write_file")
    if old == new:
        raise WorkspaceRefusal("old_string and new_string are the same; nothing to change")
    with repo.entry(raw) as entry:
        _writable_entry(entry, "edit")
        current, _ = _read_regular(entry)
        _check_read(entry, current, read_hashes)
        text = current.decode(errors="strict") if _decodes(current) else None
        if text is None or is_binary(current):
            raise WorkspaceRefusal(f"{entry.path} is a binary file; it cannot be edited as text")
        count = text.count(old)
        if count == 0:
            raise WorkspaceRefusal(
                f"old_string was not found in {entry.path}. The closest lines are:\n{_closest_lines(text, old)}\n"
                "Copy the exact text (whitespace included) from a fresh read."
            )
        if count > 1 and not replace_all:
            starts: list[int] = []
            at = text.find(old)
            while at != -1 and len(starts) < 10:
                starts.append(text.count("\n", 0, at) + 1)
                at = text.find(old, at + 1)
            raise WorkspaceRefusal(
                f"old_string occurs {count} times in {entry.path} (lines {', '.join(map(str, starts))}); "
                "include more surrounding text to make it unique, or set replace_all"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        data = updated.encode()
        _atomic_write(entry, data)
        return EditResult(
            entry.path, count if replace_all else 1, sha256(data), unified_diff(entry.path, text, updated)
        )


# --- list and grep --------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedEntry:
    path: str
    type: str  # file, directory, symlink, other
    size: int


@dataclass(frozen=True)
class Listing:
    path: str
    entries: tuple[ListedEntry, ...]
    truncated: bool


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _checked_result(parts: tuple[str, ...]) -> str:
    """A walk result's path, checked once more to be repository-relative and inside."""
    if not parts or any(part in ("", ".", "..") or "/" in part for part in parts):
        raise WorkspaceRefusal(f"internal containment check failed for {parts!r}")
    return "/".join(parts)


def _gitignore_rules(dir_fd: int, parts: tuple[str, ...]) -> list[gitignore.Rule]:
    try:
        fd = os.open(".gitignore", FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1024 * 1024:
            return []
        return gitignore.parse(os.read(fd, st.st_size).decode(errors="replace"), parts)
    finally:
        os.close(fd)


def _inherited_rules(repo_root_fd: int, parts: tuple[str, ...]) -> list[gitignore.Rule]:
    """The `.gitignore` rules of the folders above `parts` (from the root down)."""
    rules = _gitignore_rules(repo_root_fd, ())
    fd = repo_root_fd
    opened: list[int] = []
    try:
        for depth, name in enumerate(parts[:-1] if parts else ()):
            try:
                fd = os.open(name, DIRECTORY_FLAGS, dir_fd=fd)
            except OSError:
                break
            opened.append(fd)
            rules += _gitignore_rules(fd, parts[: depth + 1])
    finally:
        for owned in opened:
            os.close(owned)
    return rules


def walk_tree(
    dir_fd: int,
    parts: tuple[str, ...],
    rules: list[gitignore.Rule],
    max_depth: int,
    on_too_deep: Callable[[tuple[str, ...]], None] | None = None,
) -> Iterator[tuple[tuple[str, ...], os.DirEntry[str], int]]:
    """(components, entry, parent fd) of everything below `dir_fd` in sorted order: no `.git`,
    nothing git ignores, no symbolic link followed. The parent fd is valid while the item is current.

    Iterative, one open descriptor a level: a workspace may hold folders thousands of levels
    deep (each path within the limits), which a recursive walk met with `RecursionError`. At
    most `min(max_depth, WALK_MAX_DEPTH)` levels are descended; a folder at the limit is not
    entered and is handed to `on_too_deep`.
    """
    max_depth = min(max_depth, WALK_MAX_DEPTH)
    # One frame a folder being read: its fd (owned unless it is the caller's), its components,
    # the rules in force in it, its remaining entries and how many more levels may be descended.
    stack: list[tuple[int, tuple[str, ...], list[gitignore.Rule], Iterator[os.DirEntry[str]], int]] = []

    def enter(fd: int, at: tuple[str, ...], inherited: list[gitignore.Rule], levels: int) -> None:
        try:
            with os.scandir(fd) as scan:
                items = sorted(scan, key=lambda item: item.name)
        except OSError:
            items = []
        stack.append((fd, at, inherited + _gitignore_rules(fd, at), iter(items), levels))

    try:
        enter(dir_fd, parts, rules, max_depth)
        while stack:
            fd, at, in_force, items, levels = stack[-1]
            item = next(items, None)
            if item is None:
                stack.pop()
                if fd != dir_fd:
                    os.close(fd)
                continue
            if item.name == GIT_DIR:
                continue
            child = (*at, item.name)
            try:
                is_dir = item.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if gitignore.ignored(in_force, child, is_dir):
                continue
            yield child, item, fd
            if not is_dir:
                continue
            if levels <= 1:
                # The caller's own depth (a listing's) is not news; the walk's bound is.
                if on_too_deep is not None and max_depth == WALK_MAX_DEPTH:
                    on_too_deep(child)
                continue
            try:
                sub = os.open(item.name, DIRECTORY_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                enter(sub, child, in_force, levels - 1)
            except BaseException:
                os.close(sub)
                raise
    finally:
        for fd, *_ in stack:
            if fd != dir_fd:
                os.close(fd)


@refusing_os_errors
def list_files(repo: Repository, raw: str = ".", depth: int = 2, max_entries: int = LIST_MAX_ENTRIES) -> Listing:
    depth = max(1, min(depth, LIST_MAX_DEPTH))
    max_entries = max(1, min(max_entries, LIST_MAX_ENTRIES))
    with repo.root_fd() as root, repo.directory(raw) as folder:
        rules = _inherited_rules(root, folder.parts) if folder.parts else []
        entries: list[ListedEntry] = []
        truncated = False
        for parts, item, _ in walk_tree(folder.parent_fd, folder.parts, rules, depth):
            if len(entries) >= max_entries:
                truncated = True
                break
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the directory was read
            entries.append(ListedEntry(_checked_result(parts), _kind(st.st_mode), st.st_size))
        return Listing(display(folder.parts), tuple(entries), truncated)


@dataclass(frozen=True)
class GrepResult:
    matches: tuple[str, ...]
    files_searched: int
    truncated: bool
    # What the search left out beyond the match and file bounds (folders too deep), for the model.
    note: str = ""


def _expand_braces(glob: str) -> list[str]:
    """The globs `glob`'s `{a,b}` groups stand for (innermost first, as a shell expands them);
    a refusal past `MAX_INCLUDE_GLOBS`, counted before any is built, so no glob costs more."""
    done: list[str] = []
    pending = [glob]
    while pending:
        current = pending.pop()
        match = _BRACES.search(current)
        if not match:
            done.append(current)
            continue
        options = match.group(1).split(",")
        if len(done) + len(pending) + len(options) > MAX_INCLUDE_GLOBS:
            raise WorkspaceRefusal(
                f"include {glob[:100]!r} expands to more than {MAX_INCLUDE_GLOBS} globs; "
                "use fewer {a,b} alternatives (or several searches)"
            )
        head, tail = current[: match.start()], current[match.end() :]
        pending.extend(head + option + tail for option in reversed(options))
    done.reverse()
    return done


_BRACES = re.compile(r"\{([^{}]*)\}")


def _include_matcher(include: str | None) -> patterns.Regex | None:
    if not include:
        return None
    globs = _expand_braces(include)
    source = "|".join(f"(?:{gitignore.glob_source(glob)})" for glob in dict.fromkeys(globs))
    try:
        return patterns.compile(source)
    except patterns.PatternError as exc:
        raise WorkspaceRefusal(f"invalid include glob {include[:100]!r}: {exc}") from None


def _grep_regex(pattern: str) -> patterns.Regex:
    try:
        # `^` and `$` at each line, as before with re.MULTILINE.
        return patterns.compile(f"(?m){pattern}")
    except patterns.PatternError as exc:
        raise WorkspaceRefusal(
            f"invalid regular expression {pattern[:200]!r}: {exc} (the syntax is RE2's: Python's without "
            "backreferences or lookaround, \\z for the end of the text)"
        ) from None


@refusing_os_errors
def grep(
    repo: Repository, pattern: str, raw: str = ".", include: str | None = None, max_matches: int = 100
) -> GrepResult:
    """Lines matching `pattern` (RE2, `workspace/patterns.py`: linear in each file, whatever the
    pattern) in the files below `raw` that `include` selects."""
    regex = _grep_regex(pattern)
    include_regex = _include_matcher(include)
    include_by_path = bool(include and "/" in include)
    max_matches = max(1, min(max_matches, GREP_MAX_MATCHES))
    matches: list[str] = []
    searched = 0
    truncated = False
    too_deep: list[tuple[str, ...]] = []
    with repo.root_fd() as root, repo.directory(raw) as folder:
        rules = _inherited_rules(root, folder.parts) if folder.parts else []
        walk = walk_tree(folder.parent_fd, folder.parts, rules, WALK_MAX_DEPTH, too_deep.append)
        for parts, item, parent_fd in walk:
            if not item.is_file(follow_symlinks=False):
                continue
            if include_regex is not None:
                subject = "/".join(parts[len(folder.parts) :]) if include_by_path else parts[-1]
                if not include_regex.fullmatch(subject):
                    continue
            if searched >= GREP_MAX_FILES:
                truncated = True
                break
            data = _grep_bytes(item.name, parent_fd)
            if data is None:
                continue
            searched += 1
            path = _checked_result(parts)
            for line_no, line in _matching_lines(regex, data, max_matches - len(matches)):
                matches.append(f"{path}:{line_no}: {line}")
            if len(matches) >= max_matches:
                truncated = True
                break
    note = ""
    if too_deep:
        truncated = True
        note = (
            f"{len(too_deep)} folder(s) more than {WALK_MAX_DEPTH} levels down were not searched, "
            f"e.g. {_checked_result(too_deep[0])[:300]}"
        )
    return GrepResult(tuple(matches), searched, truncated, note)


def _matching_lines(regex: patterns.Regex, data: bytes, limit: int) -> Iterator[tuple[int, str]]:
    """(line number, line) of the first `limit` lines of `data` where a match starts; one search a
    line found, each resumed after that line, so a pattern matching everywhere costs no more."""
    pos = 0
    line_no = 1
    counted_to = 0
    found = 0
    while found < limit and pos <= len(data):
        match = regex.search(data, pos)
        if match is None:
            return
        start = match.start()
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = data.find(b"\n", start)
        if line_end == -1:
            line_end = len(data)
        line_no += data.count(b"\n", counted_to, line_start)
        counted_to = line_start
        line = data[line_start:line_end].decode(errors="replace")
        if len(line) > GREP_MAX_LINE_CHARS:
            line = line[:GREP_MAX_LINE_CHARS] + "…"
        yield line_no, line
        found += 1
        pos = line_end + 1


def _grep_bytes(name: str, parent_fd: int) -> bytes | None:
    data = read_small_file(name, parent_fd, GREP_MAX_FILE_BYTES)
    return None if data is None or is_binary(data) else data


def read_small_file(name: str, parent_fd: int, max_bytes: int) -> bytes | None:
    """The content of the regular file `name` in `parent_fd`, opened without following a link; None when
    it cannot be opened, is not a regular file or holds more than `max_bytes`."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=parent_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        chunks: list[bytes] = []
        # One byte past the bound tells a file that grew since fstat from one that fits.
        remaining = max_bytes + 1
        while remaining > 0:
            piece = os.read(fd, remaining)
            if not piece:
                break
            chunks.append(piece)
            remaining -= len(piece)
        data = b"".join(chunks)
        return None if len(data) > max_bytes else data
    finally:
        os.close(fd)


# --- stat, mkdir, delete --------------------------------------------------------------------


@dataclass(frozen=True)
class FileStat:
    path: str
    type: str
    size: int
    mode: str
    modified: str
    link_target: str = ""


@refusing_os_errors
def file_stat(repo: Repository, raw: str) -> FileStat:
    with repo.entry(raw, follow_last=False, allow_root=True) as entry:
        if entry.st is None:
            raise WorkspaceRefusal(f"{entry.path}: no such file or directory")
        st = entry.st
        target = ""
        if stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                target = os.readlink(entry.name, dir_fd=entry.parent_fd)
        modified = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).isoformat(timespec="seconds")
        return FileStat(entry.path, _kind(st.st_mode), st.st_size, f"{stat.S_IMODE(st.st_mode):04o}", modified, target)


@refusing_os_errors
def make_directory(repo: Repository, raw: str) -> str:
    parts = split_relative(raw)
    _refuse_git(parts, "mkdir")
    with repo.directory(raw, create=True) as folder:
        _refuse_git(folder.parts, "mkdir")
        return folder.path


@refusing_os_errors
def delete(repo: Repository, raw: str) -> str:
    parts = split_relative(raw)
    _refuse_git(parts, "delete")
    # The entry itself: a symbolic link is removed, never its target.
    with repo.entry(raw, follow_last=False) as entry:
        _refuse_git(entry.parts, "delete")
        if not entry.parts:
            raise WorkspaceRefusal("the repository root cannot be deleted")
        if entry.st is None:
            raise WorkspaceRefusal(f"{entry.path}: no such file or directory")
        try:
            if stat.S_ISDIR(entry.st.st_mode):
                os.rmdir(entry.name, dir_fd=entry.parent_fd)
            else:
                os.unlink(entry.name, dir_fd=entry.parent_fd)
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY:
                raise WorkspaceRefusal(
                    f"{entry.path} is a directory that is not empty; delete its entries first"
                ) from None
            raise WorkspaceRefusal(f"{entry.path}: {exc.strerror}") from None
        return entry.path

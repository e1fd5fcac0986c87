"""RELIABILITY row 19: the path-containment matrix of the workspace file operations.

Layout of every test (under pytest's tmp_path):

    workspace/popagent/        the repository the tools work on
    workspace/popagent-evil/   a prefix sibling holding a sentinel
    outside/                   a folder outside the workspace root holding a sentinel

Result: 0 reads or writes outside, checked against the sentinels (their content never
comes back, nothing is written beside them, they stay unchanged).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import unicodedata
from pathlib import Path

import pytest

from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal

SENTINEL = "SENTINEL-OUTSIDE-7f3a"
INSIDE = "inside-content"


class Layout:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "workspace" / "popagent"
        self.evil = tmp / "workspace" / "popagent-evil"
        self.outside = tmp / "outside"
        for folder in (self.root, self.evil, self.outside):
            folder.mkdir(parents=True)
        (self.evil / "secret.txt").write_text(SENTINEL)
        (self.outside / "sentinel.txt").write_text(SENTINEL)
        (self.root / "src").mkdir()
        (self.root / "src" / "app.py").write_text("print('hi')\n")
        (self.root / ".git").mkdir()
        (self.root / ".git" / "config").write_text("[core]\n")
        self.repo = Repository(self.root, "popagent")

    def outside_untouched(self) -> None:
        assert sorted(p.name for p in self.outside.iterdir()) == ["sentinel.txt"]
        assert (self.outside / "sentinel.txt").read_text() == SENTINEL
        assert sorted(p.name for p in self.evil.iterdir()) == ["secret.txt"]
        assert (self.evil / "secret.txt").read_text() == SENTINEL


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def refused(call: object, *args: object) -> str:
    with pytest.raises(WorkspaceRefusal) as caught:
        call(*args)  # type: ignore[operator]
    assert SENTINEL not in str(caught.value)
    return str(caught.value)


def every_operation(layout: Layout, path: str) -> None:
    """Every file operation on `path` is refused and nothing outside is read or written."""
    repo = layout.repo
    refused(files.read_file, repo, path)
    refused(files.write_file, repo, path, "x", {})
    refused(files.edit_file, repo, path, "S", "T", False, {})
    refused(files.file_stat, repo, f"{path}/x")
    refused(files.list_files, repo, path)
    refused(files.grep, repo, "SENTINEL", path)
    refused(files.make_directory, repo, f"{path}/new")
    layout.outside_untouched()


@pytest.mark.parametrize(
    "path",
    [
        "../popagent-evil/secret.txt",
        "..",
        "src/../../popagent-evil/secret.txt",
        "./../outside/sentinel.txt",
        "src/..",
    ],
)
def test_dot_dot_is_refused(layout: Layout, path: str) -> None:
    assert "'..'" in refused(files.read_file, layout.repo, path)
    every_operation(layout, path)


def test_absolute_paths_are_refused(layout: Layout) -> None:
    for path in (str(layout.outside / "sentinel.txt"), str(layout.root / "src" / "app.py"), "/etc/passwd", "//x"):
        assert "absolute path" in refused(files.read_file, layout.repo, path)
        every_operation(layout, path)
    assert "'~'" in refused(files.read_file, layout.repo, "~/x")


def test_prefix_sibling_is_outside(layout: Layout) -> None:
    # A link into `popagent-evil` is outside `popagent` although the string starts the same.
    (layout.root / "sibling").symlink_to("../popagent-evil")
    (layout.root / "sibling-abs").symlink_to(layout.evil)
    for path in ("sibling", "sibling/secret.txt", "sibling-abs", "sibling-abs/secret.txt"):
        every_operation(layout, path)
    # A repository registered as the sibling's prefix is just another folder.
    evil_repo = Repository(layout.evil)
    assert files.read_file(evil_repo, "secret.txt").content.strip().endswith(SENTINEL)
    assert "popagent-evil" not in str(layout.repo.root)


def test_symlinks_to_outside_files_and_directories(layout: Layout) -> None:
    root = layout.root
    (root / "file-abs").symlink_to(layout.outside / "sentinel.txt")
    (root / "file-rel").symlink_to("../../outside/sentinel.txt")
    (root / "dir-abs").symlink_to(layout.outside)
    (root / "src" / "dir-rel").symlink_to("../../../outside")
    for path in ("file-abs", "file-rel", "dir-abs", "dir-abs/sentinel.txt", "src/dir-rel", "src/dir-rel/sentinel.txt"):
        every_operation(layout, path)
    # Writing a new file into a linked-outside folder.
    refused(files.write_file, layout.repo, "dir-abs/new.txt", "x", {})
    refused(files.write_file, layout.repo, "src/dir-rel/new.txt", "x", {})
    # Deleting the link removes the link, never its target.
    assert files.delete(layout.repo, "file-abs") == "file-abs"
    assert files.delete(layout.repo, "dir-abs") == "dir-abs"
    layout.outside_untouched()


def test_symlink_chains(layout: Layout) -> None:
    root = layout.root
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("src/c")
    (root / "src" / "c").symlink_to("../../popagent-evil/secret.txt")
    every_operation(layout, "a")
    # A chain that stays inside is followed, and its canonical path is what is reported.
    (root / "x").symlink_to("y")
    (root / "y").symlink_to("src/app.py")
    assert files.read_file(layout.repo, "x").path == "src/app.py"
    # A loop ends with a clear error.
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    assert "too many levels" in refused(files.read_file, layout.repo, "loop1")
    layout.outside_untouched()


def test_parent_directory_symlinks(layout: Layout) -> None:
    root = layout.root
    (root / "src" / "up").symlink_to("..")  # the repository root: inside
    (root / "src" / "up2").symlink_to("../..")  # the workspace root: outside
    (root / "src" / "up3").symlink_to("../../popagent-evil")
    assert files.read_file(layout.repo, "src/up/src/app.py").path == "src/app.py"
    for path in ("src/up2", "src/up2/popagent-evil/secret.txt", "src/up3/secret.txt", "src/up/src/up2/outside"):
        every_operation(layout, path)
    # `.git` reached through a parent link is still `.git`.
    refused(files.write_file, layout.repo, "src/up/.git/config", "x", {})


def test_unicode_look_alikes_never_escape(layout: Layout) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    (layout.root / nfc).write_text("accent")
    assert files.read_file(layout.repo, nfc).content.strip().endswith("accent")
    # The other normal form is another name: not found, never another file.
    assert "no such file" in refused(files.read_file, layout.repo, nfd)
    look_alikes = [
        "\u2024\u2024/popagent-evil/secret.txt",  # one dot leader, twice
        "\uff0e\uff0e/popagent-evil/secret.txt",  # fullwidth full stops
        "\u2025/popagent-evil/secret.txt",  # two dot leader
        "..\u2215popagent-evil\u2215secret.txt",  # division slash
        "\uff0f..\uff0fpopagent-evil",  # fullwidth solidus
        "\u002e\u0307\u002e/popagent-evil",  # dots with a combining mark
    ]
    for path in look_alikes:
        with pytest.raises(WorkspaceRefusal):
            files.read_file(layout.repo, path)
    # Written, such a name is an ordinary file inside the repository.
    result = files.write_file(layout.repo, "\uff0e\uff0e/x.txt", "inside", {})
    assert (layout.root / "\uff0e\uff0e" / "x.txt").read_text() == "inside"
    assert result.created
    layout.outside_untouched()


def test_list_and_grep_results_never_come_through_links(layout: Layout) -> None:
    root = layout.root
    (root / "dir-abs").symlink_to(layout.outside)
    (root / "src" / "dir-rel").symlink_to("../../popagent-evil")
    (root / "file-abs").symlink_to(layout.outside / "sentinel.txt")
    (root / "src" / "up").symlink_to("..")
    listing = files.list_files(layout.repo, ".", depth=10)
    paths = {entry.path: entry.type for entry in listing.entries}
    assert paths["dir-abs"] == "symlink"
    assert paths["file-abs"] == "symlink"
    assert not any(path.endswith(("sentinel.txt", "secret.txt")) for path in paths)
    assert ".git" not in paths and not any(path.startswith(".git/") for path in paths)
    found = files.grep(layout.repo, "SENTINEL|print", ".")
    assert found.matches == ("src/app.py:1: print('hi')",)
    assert files.grep(layout.repo, SENTINEL, ".", include="*.txt").matches == ()
    layout.outside_untouched()


def test_git_internals_are_read_only(layout: Layout) -> None:
    repo = layout.repo
    files.read_file(repo, ".git/config")  # reading is allowed
    hashes = {".git/config": files.read_file(repo, ".git/config").sha256}
    for call in (
        lambda: files.write_file(repo, ".git/config", "x", hashes),
        lambda: files.write_file(repo, ".git/hooks/pre-commit", "#!/bin/sh\n", {}),
        lambda: files.edit_file(repo, ".git/config", "core", "x", False, hashes),
        lambda: files.make_directory(repo, ".git/hooks"),
        lambda: files.delete(repo, ".git/config"),
        lambda: files.delete(repo, ".git"),
        lambda: files.write_file(repo, "sub/.git/config", "x", {}),
    ):
        with pytest.raises(WorkspaceRefusal, match="read-only"):
            call()
    (layout.root / "g").symlink_to(".git")
    with pytest.raises(WorkspaceRefusal, match="read-only"):
        files.write_file(repo, "g/hooks/pre-commit", "#!/bin/sh\n", {})
    assert not (layout.root / ".git" / "hooks").exists()
    assert not (layout.root / "sub").exists()
    assert (layout.root / ".git" / "config").read_text() == "[core]\n"
    with pytest.raises(WorkspaceRefusal, match="root"):
        files.delete(repo, ".")


def test_atomic_writes_keep_the_mode(layout: Layout) -> None:
    script = layout.root / "run.sh"
    script.write_text("#!/bin/sh\necho one\n")
    script.chmod(0o754)
    before_inode = script.stat().st_ino
    hashes = {"run.sh": files.read_file(layout.repo, "run.sh").sha256}
    result = files.edit_file(layout.repo, "run.sh", "one", "two", False, hashes)
    assert script.read_text() == "#!/bin/sh\necho two\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o754
    assert script.stat().st_ino != before_inode  # replaced by rename, not rewritten in place
    assert "-echo one\n+echo two" in result.diff
    assert not [p for p in layout.root.iterdir() if p.name.endswith(".tmp")]


def test_special_files_never_block(layout: Layout) -> None:
    os.mkfifo(layout.root / "fifo")
    started = time.monotonic()
    assert "not a regular file" in refused(files.read_file, layout.repo, "fifo")
    assert files.grep(layout.repo, "x", ".").matches == ()
    assert time.monotonic() - started < 1


SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    base, iterations = sys.argv[1], int(sys.argv[2])
    os.chdir(base)
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2

    def exchange():
        # Atomic: `d` is always either the folder or the link, never missing.
        if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"d.link", RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    print("ready", flush=True)
    for _ in range(iterations):
        exchange()  # d is now the link to outside/
        time.sleep(0.00005)  # each state lasts long enough for tool calls to meet it
        exchange()  # and the folder again
        time.sleep(0.00005)
    print("done", flush=True)
    """
)


def test_toctou_swap_race(layout: Layout) -> None:
    """A separate process swaps `d` (a folder inside) for a link to `outside/` 10,000 times
    while the tools read `d/f` and write `d/g`: 0 reads or writes outside."""
    root = layout.root
    (root / "d").mkdir()
    (root / "d" / "f").write_text(INSIDE)
    (layout.outside / "f").write_text(SENTINEL)
    (root / "d.link").symlink_to(layout.outside)
    repo = layout.repo
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(root), "10000"], stdout=subprocess.PIPE, text=True)
    assert swapper.stdout is not None
    assert swapper.stdout.readline().strip() == "ready"
    reads = writes = refusals = 0
    hashes: dict[str, str] = {}
    errors: list[BaseException] = []

    def hammer() -> None:
        nonlocal reads, writes, refusals
        try:
            while swapper.poll() is None:
                try:
                    result = files.read_file(repo, "d/f")
                    assert SENTINEL not in result.content
                    reads += 1
                except WorkspaceRefusal:
                    refusals += 1
                try:
                    written = files.write_file(repo, "d/g", f"w{writes}", hashes)
                    hashes[written.path] = written.sha256
                    writes += 1
                except WorkspaceRefusal as exc:
                    if "changed since" in str(exc) or "before overwriting" in str(exc):
                        with contextlib.suppress(WorkspaceRefusal):
                            hashes["d/g"] = files.read_file(repo, "d/g").sha256
                    refusals += 1
                try:
                    names = [e.path for e in files.list_files(repo, "d").entries]
                    assert not any("sentinel" in name for name in names)
                    assert files.grep(repo, SENTINEL, ".").matches == ()
                except WorkspaceRefusal:
                    refusals += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    assert swapper.wait(timeout=30) == 0
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    # The race was really run: the tools met the link and were refused, and also got through.
    print(f"toctou: {reads} reads, {writes} writes, {refusals} refusals")
    assert refusals > 0 and reads > 0 and writes > 0
    assert sorted(p.name for p in layout.outside.iterdir()) == ["f", "sentinel.txt"]
    assert (layout.outside / "f").read_text() == SENTINEL
    assert (layout.outside / "sentinel.txt").read_text() == SENTINEL

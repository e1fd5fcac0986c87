"""The turn's repository directory: opened once when the turn's hands are made, held to the turn's end.

Layout of every test (under pytest's tmp_path):

    workspace/holder/repo/     the repository the turn works on (registered as holder/repo)
    elsewhere/repo/            a look-alike holding the canary, outside the workspace root

The attack: while a turn runs, a parent folder of its repository (`holder`) is replaced by a
symbolic link to `elsewhere`. Every later tool call of the turn must still reach the
repository checked at the turn's start (or be refused), never the canary.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from popagent_agent_runner.context.hands import Hands, TurnHands
from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from popagent_agent_runner.workspace.sandbox import Sandbox
from support.canary import CANARY, assert_no_canary

ORIGINAL = "original content\n"


class Layout:
    def __init__(self, tmp: Path) -> None:
        self.workspace_root = tmp / "workspace"
        self.holder = self.workspace_root / "holder"
        self.repo = self.holder / "repo"
        self.elsewhere = tmp / "elsewhere"
        for folder in (self.repo / "src", self.elsewhere / "repo" / "src"):
            folder.mkdir(parents=True)
        (self.repo / "data.txt").write_text(ORIGINAL)
        (self.repo / "src" / "app.py").write_text("print('original')\n")
        (self.elsewhere / "repo" / "data.txt").write_text(CANARY)
        (self.elsewhere / "repo" / "src" / "app.py").write_text(f"print({CANARY!r})\n")
        self.hands = Hands(self.workspace_root, Sandbox())

    def turn(self) -> TurnHands:
        hands = self.hands.for_turn("repo", "holder/repo")
        assert hands.repository is not None, hands.problem
        return hands

    def swap_holder_for_a_link(self) -> None:
        """What another workspace's shell did: the parent folder moved away, a link in its place."""
        self.holder.rename(self.workspace_root / "holder-moved")
        self.holder.symlink_to(self.elsewhere)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def descriptors_into(folder: Path) -> set[tuple[str, str]]:
    """This process's open descriptors of `folder` or anything in it: (number, target). Only these,
    since other tests of the same worker open and close sockets and files meanwhile."""
    found: set[tuple[str, str]] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(folder) or target.startswith(f"{folder}/"):
            found.add((fd, target))
    return found


async def test_a_parent_swapped_for_a_link_mid_turn_redirects_nothing(layout: Layout) -> None:
    hands = layout.turn()
    repo = hands.repo()
    assert files.read_file(repo, "data.txt").content.endswith(ORIGINAL.rstrip("\n") + "\n")

    layout.swap_holder_for_a_link()

    read = files.read_file(repo, "data.txt")
    assert_no_canary(read.content)
    assert ORIGINAL.strip() in read.content
    listing = files.list_files(repo, ".", depth=3)
    assert {entry.path for entry in listing.entries} == {"data.txt", "src", "src/app.py"}
    grep = files.grep(repo, "print", ".")
    assert grep.matches == ("src/app.py:1: print('original')",)
    assert_no_canary(repr(grep.matches))
    # A write lands in the repository checked at the turn's start, never beside the canary.
    files.write_file(repo, "new.txt", "written\n", {})
    assert (layout.workspace_root / "holder-moved" / "repo" / "new.txt").read_text() == "written\n"
    assert not (layout.elsewhere / "repo" / "new.txt").exists()
    assert (layout.elsewhere / "repo" / "data.txt").read_text() == CANARY
    await hands.close()


async def test_a_turn_starting_after_the_swap_is_refused(layout: Layout) -> None:
    """The registration resolves inside the root; a link swapped in before the directory is
    opened (between that check and the open) is refused, not followed."""
    layout.swap_holder_for_a_link()
    repository_path = layout.holder / "repo"
    with pytest.raises(WorkspaceRefusal) as refused:
        Repository(repository_path, "repo")
    assert "symbolic link" in str(refused.value)
    assert_no_canary(str(refused.value))


async def test_a_missing_directory_is_the_same_clear_error_for_every_tool(layout: Layout) -> None:
    hands = layout.hands.for_turn("gone", "holder/not-cloned")
    assert hands.repository is None
    with pytest.raises(WorkspaceRefusal) as refused:
        hands.repo()
    assert "has no directory" in str(refused.value) and "does not exist" in str(refused.value)
    await hands.close()


async def test_a_directory_removed_mid_turn_is_a_clear_error(layout: Layout) -> None:
    hands = layout.turn()
    for entry in sorted(layout.repo.rglob("*"), reverse=True):
        entry.rmdir() if entry.is_dir() else entry.unlink()
    layout.repo.rmdir()
    with pytest.raises(WorkspaceRefusal) as refused:
        files.read_file(hands.repo(), "data.txt")
    assert "has no directory" in str(refused.value) and "was removed" in str(refused.value)
    await hands.close()


async def test_the_directory_is_released_when_the_turn_ends(layout: Layout) -> None:
    before = descriptors_into(layout.workspace_root)
    hands = layout.turn()
    assert len(descriptors_into(layout.workspace_root) - before) == 1  # the held directory
    repo = hands.repo()
    await asyncio.gather(hands.close(), hands.close())  # the turn and a task ending together
    assert descriptors_into(layout.workspace_root) <= before
    with pytest.raises(WorkspaceRefusal) as refused:
        files.read_file(repo, "data.txt")
    assert "the turn that opened it has ended" in str(refused.value)
    await hands.close()
    assert descriptors_into(layout.workspace_root) <= before


async def test_no_descriptor_leaks_over_many_turns(layout: Layout) -> None:
    def one_turn_of_tools(repo: Repository) -> None:
        files.read_file(repo, "data.txt")
        files.list_files(repo, ".")
        files.grep(repo, "original", ".")
        with pytest.raises(WorkspaceRefusal):
            files.read_file(repo, "no-such-file")

    one_turn_of_tools(layout.turn().repo())  # the first turn may open what stays (imports, caches)
    before = descriptors_into(layout.workspace_root)
    for _ in range(200):
        hands = layout.turn()
        await asyncio.to_thread(one_turn_of_tools, hands.repo())
        await hands.close()
    assert descriptors_into(layout.workspace_root) <= before


def test_each_caller_gets_its_own_descriptor(layout: Layout) -> None:
    """Closing the descriptor a caller was handed leaves the held one, and other callers', intact."""
    repo = Repository(layout.repo, "repo")
    with repo.root_fd() as first, repo.root_fd() as second:
        assert first != second
        assert os.path.samestat(os.fstat(first), os.fstat(second))
    with pytest.raises(OSError), repo.root_fd() as handed:
        os.close(handed)  # a careless caller; its block's own close then fails, nobody else's
    assert files.read_file(repo, "data.txt").content.strip().endswith(ORIGINAL.strip())
    repo.close()

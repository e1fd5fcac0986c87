"""The file operations' contract: bounds, binary refusal, edit matching, listing and grep rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    root = tmp_path / "repo"
    root.mkdir()
    return Repository(root, "repo")


def test_reads_are_numbered_and_bounded_with_where_to_continue(repo: Repository) -> None:
    (repo.root / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    first = files.read_file(repo, "long.txt")
    assert (first.start_line, first.end_line, first.total_lines, first.next_line) == (1, 2000, 3000, 2001)
    assert first.content.startswith("     1\tline 1\n")
    assert first.content.endswith("(truncated, continue at line 2001)\n")
    rest = files.read_file(repo, "long.txt", offset=2001)
    assert (rest.start_line, rest.end_line, rest.next_line) == (2001, 3000, 0)
    window = files.read_file(repo, "long.txt", offset=10, limit=3)
    assert window.content == "    10\tline 10\n    11\tline 11\n    12\tline 12\n"
    # 256 KiB a call, whatever the line count.
    (repo.root / "wide.txt").write_text(("x" * 1000 + "\n") * 400)
    wide = files.read_file(repo, "wide.txt")
    assert wide.end_line < 400 and wide.next_line == wide.end_line + 1
    assert len(wide.content.encode()) <= files.READ_MAX_BYTES + 100
    with pytest.raises(WorkspaceRefusal, match="past its end"):
        files.read_file(repo, "long.txt", offset=5000)


def test_binary_files_are_refused_with_size_and_type(repo: Repository) -> None:
    (repo.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    with pytest.raises(WorkspaceRefusal, match=r"binary file \(image/png, 108 bytes\)"):
        files.read_file(repo, "logo.png")
    (repo.root / "blob.bin").write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(WorkspaceRefusal, match=r"binary file \(application/octet-stream, 4 bytes\)"):
        files.read_file(repo, "blob.bin")


def test_edit_matches_exactly_once_unless_replace_all(repo: Repository) -> None:
    (repo.root / "a.py").write_text("x = 1\ny = 1\nz = 2\n")
    hashes = {"a.py": files.read_file(repo, "a.py").sha256}
    with pytest.raises(WorkspaceRefusal, match=r"occurs 2 times in a.py \(lines 1, 2\)"):
        files.edit_file(repo, "a.py", "= 1", "= 3", False, hashes)
    with pytest.raises(WorkspaceRefusal) as missed:
        files.edit_file(repo, "a.py", "z = 3", "z = 4", False, hashes)
    assert "closest lines" in str(missed.value) and "     3\tz = 2" in str(missed.value)
    result = files.edit_file(repo, "a.py", "= 1", "= 3", True, hashes)
    assert result.replacements == 2
    assert (repo.root / "a.py").read_text() == "x = 3\ny = 3\nz = 2\n"


def test_listing_hides_git_respects_gitignore_and_depth(repo: Repository) -> None:
    root = repo.root
    for relative in ("src/app.py", "src/deep/more/x.py", "build/out.o", "notes.log", "keep.log", ".git/config"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("x")
    (root / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (root / "src" / ".gitignore").write_text("/deep/more\n")
    listed = {entry.path for entry in files.list_files(repo, ".", depth=10).entries}
    assert listed == {".gitignore", "keep.log", "src", "src/.gitignore", "src/app.py", "src/deep"}
    shallow = {entry.path for entry in files.list_files(repo, ".", depth=1).entries}
    assert shallow == {".gitignore", "keep.log", "src"}
    # Listing a subfolder still applies the rules of the folders above it.
    assert {e.path for e in files.list_files(repo, "src", depth=5).entries} == {
        "src/.gitignore",
        "src/app.py",
        "src/deep",
    }


def test_grep_bounds_and_include_globs(repo: Repository) -> None:
    root = repo.root
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("".join(f"match {i}\n" for i in range(50)))
    (root / "src" / "b.ts").write_text("match in ts\n")
    (root / "src" / "c.tsx").write_text("match in tsx\n")
    (root / "data.bin").write_bytes(b"match\x00binary")
    found = files.grep(repo, r"^match \d+$", ".", max_matches=10)
    assert found.truncated and len(found.matches) == 10 and found.matches[0] == "src/a.py:1: match 0"
    ts = files.grep(repo, "match", ".", include="*.{ts,tsx}")
    assert ts.matches == ("src/b.ts:1: match in ts", "src/c.tsx:1: match in tsx")
    by_path = files.grep(repo, "match", ".", include="src/**/*.ts")
    assert by_path.matches == ("src/b.ts:1: match in ts",)
    assert all("data.bin" not in line for line in files.grep(repo, "match", ".", max_matches=500).matches)
    with pytest.raises(WorkspaceRefusal, match="invalid regular expression"):
        files.grep(repo, "(", ".")


def test_stat_mkdir_and_delete(repo: Repository) -> None:
    assert files.make_directory(repo, "a/b/c") == "a/b/c"
    assert files.file_stat(repo, "a/b").type == "directory"
    (repo.root / "a" / "b" / "c" / "f.txt").write_text("x")
    with pytest.raises(WorkspaceRefusal, match="not empty"):
        files.delete(repo, "a/b/c")
    assert files.delete(repo, "a/b/c/f.txt") == "a/b/c/f.txt"
    assert files.delete(repo, "a/b/c") == "a/b/c"
    stat = files.file_stat(repo, "a")
    assert (stat.type, stat.mode) == ("directory", stat.mode) and len(stat.mode) == 4

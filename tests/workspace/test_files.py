"""The file operations' contract: bounds, binary refusal, edit matching, listing and grep rules."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from popagent_agent_runner.workspace import files
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from support.deep_trees import make_nested, remove_nested


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


# --- attacker-written patterns and trees: every call bounded -----------------------------------
# Each took from seconds to hours (or failed with RecursionError) before grep and the globs moved
# to RE2 and the walk became iterative; the bounds below are generous "does not hang" bounds.


def test_a_backtracking_grep_pattern_answers_at_once(repo: Repository) -> None:
    # (a+)+$ over 28 bytes held a worker 12 s in Python's re, doubling with each character.
    (repo.root / "a.txt").write_text("a" * 27 + "!\n" + "aaa\n")
    started = time.monotonic()
    found = files.grep(repo, "(a+)+$", ".")
    assert time.monotonic() - started < 3
    assert found.matches == ("a.txt:2: aaa",)


def test_grep_speaks_re2_and_says_so_when_a_pattern_needs_backtracking(repo: Repository) -> None:
    (repo.root / "a.py").write_text("def f():\n    return 1\nx = f()\n")
    assert files.grep(repo, r"^\s+return \d$", ".").matches == ("a.py:2:     return 1",)
    assert files.grep(repo, r"(?i)DEF F", ".").matches == ("a.py:1: def f():",)
    with pytest.raises(WorkspaceRefusal, match=r"invalid regular expression.*RE2.*lookaround"):
        files.grep(repo, r"f(?=\()", ".")
    with pytest.raises(WorkspaceRefusal, match="invalid regular expression"):
        files.grep(repo, r"(x)\1", ".")


def test_a_pattern_matching_everywhere_reports_each_line_once(repo: Repository) -> None:
    (repo.root / "wide.txt").write_text("x" * 100_000 + "\nsecond\n\nfourth")
    found = files.grep(repo, "", ".", max_matches=10)
    assert [line.split(":")[1] for line in found.matches] == ["1", "2", "3", "4"]
    assert found.matches[1:] == ("wide.txt:2: second", "wide.txt:3: ", "wide.txt:4: fourth")


def test_an_include_brace_bomb_is_refused_before_it_expands(repo: Repository) -> None:
    (repo.root / "src").mkdir()
    (repo.root / "src" / "b.ts").write_text("match\n")
    (repo.root / "src" / "c.py").write_text("match\n")
    # 2^16 globs (80 characters): seconds and hundreds of MB before; 2^100 fit in the 500 allowed.
    started = time.monotonic()
    with pytest.raises(WorkspaceRefusal, match="expands to more than 256 globs"):
        files.grep(repo, "match", ".", include="{a,b}" * 16)
    with pytest.raises(WorkspaceRefusal, match="expands to more than"):
        files.grep(repo, "match", ".", include="{a,b}" * 100)
    assert time.monotonic() - started < 3
    # Nested and repeated groups within the bound still select what they name.
    assert files.grep(repo, "match", ".", include="{src/{b,x}.ts,**/*.{py,md}}").matches == (
        "src/b.ts:1: match",
        "src/c.py:1: match",
    )


def test_a_gitignore_glob_that_backtracks_costs_nothing(repo: Repository) -> None:
    # `*a*a*a*a*a*a*a*b` against a 60-character name: ~20 s in Python's re for one name.
    (repo.root / ".gitignore").write_text("*a" * 7 + "*b\n[z-a]\n*.log\n")
    (repo.root / ("a" * 60)).write_text("match\n")
    (repo.root / "x.log").write_text("match\n")
    started = time.monotonic()
    listed = {entry.path for entry in files.list_files(repo, ".").entries}
    found = files.grep(repo, "match", ".")
    assert time.monotonic() - started < 3
    # The rule RE2 refuses ([z-a]) is left out; the others apply.
    assert listed == {".gitignore", "a" * 60}
    assert found.matches == (f"{'a' * 60}:1: match",)


def test_a_folder_thousands_of_levels_deep_bounds_grep_instead_of_failing_it(repo: Repository) -> None:
    # 2,000 levels (3,999 characters): every later grep over an ancestor failed with RecursionError.
    (repo.root / "top.txt").write_text("match\n")
    make_nested(repo.root, 2000, {9: ("near.txt", "match\n"), 1999: ("bottom.txt", "match\n")})
    try:
        found = files.grep(repo, "match", ".")
        assert found.matches == ("d/d/d/d/d/d/d/d/d/d/near.txt:1: match", "top.txt:1: match")
        assert found.truncated and f"more than {files.WALK_MAX_DEPTH} levels down were not searched" in found.note
        assert files.grep(repo, "match", "d/d").matches == ("d/d/d/d/d/d/d/d/d/d/near.txt:1: match",)
        assert {e.path for e in files.list_files(repo, ".", depth=2).entries} == {"top.txt", "d", "d/d"}
    finally:
        remove_nested(repo.root)

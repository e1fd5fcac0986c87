"""A package's module table says what is in the package, all of it and nothing else.

A package `__init__.py` whose docstring has a Markdown module table (a `| module | ... |`
header, rows like "| `runner.py` | ... |" or "| `tools/` | ... |") is the reader's map of
that folder. Each module (`x.py`) and folder (`x/`) a row names must exist there, and every
module (a `.py` file other than `__init__.py`) and subpackage (a folder with an `__init__.py`)
of the folder must be named by a row, so the map cannot drift from the code as files move.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_HEADER = re.compile(r"^\|\s*module\s*\|", re.IGNORECASE)
_SEPARATOR = re.compile(r"^\|[\s|:-]+\|$")
_NAME = re.compile(r"`([^`]+)`")


def package_inits() -> Iterator[Path]:
    for pattern in ("services/*/src/**/__init__.py", "libs/*/src/**/__init__.py"):
        for path in sorted(REPO.glob(pattern)):
            if not {"node_modules", "__pycache__"} & set(path.parts):
                yield path


def table_names(docstring: str) -> set[str] | None:
    """The modules (`x.py`) and folders (`x/`) named in the first cell of the module table's rows.

    None when the docstring has no module table. Other names in a first cell (`queries.sql`, a
    dotted library module) are not this folder's modules and are left out.
    """
    lines = [line.strip() for line in docstring.splitlines()]
    header = next((index for index, line in enumerate(lines) if _HEADER.match(line)), None)
    if header is None:
        return None
    names: set[str] = set()
    for line in lines[header + 1 :]:
        if not line.startswith("|"):
            break
        if _SEPARATOR.match(line):
            continue
        first_cell = line.split("|")[1]
        names |= {name for name in _NAME.findall(first_cell) if name.endswith((".py", "/"))}
    return names


def tabled_packages() -> list[tuple[Path, set[str]]]:
    found = []
    for init in package_inits():
        docstring = ast.get_docstring(ast.parse(init.read_text(), str(init)))
        names = table_names(docstring or "")
        if names is not None:
            found.append((init.parent, names))
    return found


def contents(package: Path) -> set[str]:
    """The modules and subpackages of `package`, as its table would name them."""
    modules = {path.name for path in package.glob("*.py") if path.name != "__init__.py"}
    subpackages = {f"{path.parent.name}/" for path in package.glob("*/__init__.py")}
    return modules | subpackages


def test_the_table_reader_sees_modules_and_folders_and_only_the_first_cell() -> None:
    docstring = """A package.

    | module | does |
    |---|---|
    | `runner.py` | the turn (calls `helper.py`) |
    | `audit.py`, `queries.sql` | audit rows |
    | `tools/` | one folder per tool group |

    After the table: `stray.py`.
    """
    assert table_names(docstring) == {"runner.py", "audit.py", "tools/"}
    assert table_names("A package without a table, naming `runner.py`.") is None


_PACKAGES = tabled_packages()


@pytest.mark.parametrize(
    ("package", "names"), _PACKAGES, ids=[str(package.relative_to(REPO)) for package, _ in _PACKAGES]
)
def test_a_module_table_lists_exactly_the_package_contents(package: Path, names: set[str]) -> None:
    present = contents(package)
    missing = sorted(names - {name for name in names if (package / name.rstrip("/")).exists()})
    unlisted = sorted(present - names)
    assert not missing and not unlisted, f"listed but absent: {missing}; present but not listed: {unlisted}"


def test_contents_are_the_modules_and_subpackages_only(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""A package."""\n')
    (tmp_path / "runner.py").write_text("")
    (tmp_path / "queries.sql").write_text("")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    (tmp_path / "migrations").mkdir()
    assert contents(tmp_path) == {"runner.py", "tools/"}

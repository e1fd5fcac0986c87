"""The test tree's own rules, checked on its source.

- No module imports from a conftest or from a `test_` module: what tests share lives in a
  helper module (tests/support for every suite, a suite's own helpers next to its tests),
  so a test module can be moved, renamed or run alone without breaking another.
- A conftest holds only fixtures and pytest hooks (plus imports, `pytest_plugins` and
  `pytest.register_assert_rewrite`): a class, a constant or a helper function there is a
  shared helper in the wrong place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def python_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        if not {"node_modules", ".venv", "__pycache__"} & set(path.relative_to(root).parts):
            yield path


def _is_test_module(name: str) -> bool:
    return name == "conftest" or name.startswith("test_")


def forbidden_imports(path: Path) -> list[str]:
    """`path:line imports <module>` for every import of a conftest or a test module in `path`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            # `from . import conftest` names the module in the imported names.
            modules = [base] + [f"{base}.{alias.name}".lstrip(".") for alias in node.names if node.module is None]
        else:
            continue
        for module in modules:
            if any(_is_test_module(part) for part in module.split(".") if part):
                found.append(f"{path}:{node.lineno} imports {module}")
    return found


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
        isinstance(target, ast.Name) and target.id == "fixture"
    )


def _allowed_in_conftest(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr):
        value = node.value
        is_docstring = isinstance(value, ast.Constant) and isinstance(value.value, str)
        is_rewrite = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "register_assert_rewrite"
        )
        return is_docstring or is_rewrite
    if isinstance(node, ast.Assign):
        return [ast.unparse(target) for target in node.targets] == ["pytest_plugins"]
    if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports
        return ast.unparse(node.test) == "TYPE_CHECKING" and all(
            isinstance(inner, ast.Import | ast.ImportFrom) for inner in node.body
        )
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name.startswith("pytest_") or any(_is_fixture(d) for d in node.decorator_list)
    return False


def conftest_strays(path: Path) -> list[str]:
    """`path:line <statement>` for every top-level statement of a conftest that is not a fixture or hook."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path}:{node.lineno} {ast.unparse(node).splitlines()[0]}"
        for node in tree.body
        if not _allowed_in_conftest(node)
    ]


def test_no_module_imports_from_a_conftest_or_a_test_module() -> None:
    found = [line for path in python_files(TESTS) for line in forbidden_imports(path)]
    assert found == [], "move what is shared to a helper module:\n" + "\n".join(found)


def test_conftest_files_hold_only_fixtures_and_hooks() -> None:
    found = [line for path in python_files(TESTS) if path.name == "conftest.py" for line in conftest_strays(path)]
    assert found == [], "move these to a helper module:\n" + "\n".join(found)


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_uses_conftest.py").write_text(
        "from .conftest import API_KEY\n"
        "from suite.test_other import helper\n"
        "from . import conftest\n"
        "import suite.test_other\n"
        "from suite.helpers import fine\n"
        "from support.stacks import Stack\n"
    )
    (suite / "conftest.py").write_text(
        '"""Doc."""\n'
        "from typing import TYPE_CHECKING\n"
        "import pytest\n"
        "if TYPE_CHECKING:\n"
        "    from x import Y\n"
        'pytest_plugins = ["p"]\n'
        'pytest.register_assert_rewrite("h")\n'
        "API_KEY = 'k'\n"
        "class Harness: ...\n"
        "def helper() -> None: ...\n"
        "@pytest.fixture\n"
        "def ok() -> None: ...\n"
        "@pytest.fixture(scope='session')\n"
        "async def also_ok() -> None: ...\n"
        "def pytest_configure(config) -> None: ...\n"
    )

    imports = forbidden_imports(suite / "test_uses_conftest.py")
    strays = conftest_strays(suite / "conftest.py")

    assert [line.split(" imports ")[1] for line in imports] == [
        ".conftest",
        "suite.test_other",
        "conftest",
        "suite.test_other",
    ]
    assert [line.split(" ", 1)[1] for line in strays] == [
        "API_KEY = 'k'",
        "class Harness:",
        "def helper() -> None:",
    ]

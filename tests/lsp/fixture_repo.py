"""A small repository of Python and TypeScript files the language-server tests inspect.

Positions the tests use are written next to the code they point at (1-based, as the tool
takes and answers them).
"""

from __future__ import annotations

from pathlib import Path

WORKSPACE = "lsp-fixture"

UTIL_PY = '''"""Helpers."""


def greet(name: str, times: int = 1) -> str:
    """Say hello to someone."""
    return ("hello " + name + " ") * times


class Shape:
    def area(self) -> float:
        raise NotImplementedError


class Square(Shape):
    def __init__(self, side: float) -> None:
        self.side = side

    def area(self) -> float:
        return self.side * self.side
'''
MAIN_PY = """import os

from pkg.util import greet

count: int = "three"
print(greet("ada"))
print(greet("bob", 2))
print(os.path.join("a", "b"))
print(undefined_name)
"""
UTIL_TS = """/** Say hello to someone. */
export function greet(name: string, times = 1): string {
  return `hello ${name} `.repeat(times);
}
"""
MAIN_TS = """import { greet } from "./util";

const count: number = "three";
console.log(greet("ada"));
console.log(greet("bob", 2));
console.log(undefinedName);
"""
TSCONFIG = """{
  "compilerOptions": { "strict": true, "target": "es2022", "module": "nodenext", "noEmit": true },
  "include": ["web"]
}
"""
FILES = {
    "pkg/__init__.py": "",
    "pkg/util.py": UTIL_PY,
    "pkg/main.py": MAIN_PY,
    "web/util.ts": UTIL_TS,
    "web/main.ts": MAIN_TS,
    "tsconfig.json": TSCONFIG,
    "README.md": "# fixture\n",
}

# `greet` in `print(greet("ada"))` (main.py line 6) and in `console.log(greet("ada"))` (main.ts line 4).
PY_CALL = ("pkg/main.py", 6, 7)
PY_DEFINITION = {"path": "pkg/util.py", "line": 4, "character": 5}
PY_OS_PATH = ("pkg/main.py", 8, 10)
TS_CALL = ("web/main.ts", 4, 13)
TS_DEFINITION = {"path": "web/util.ts", "line": 2, "character": 17}
TS_CONSOLE = ("web/main.ts", 4, 3)


def write(folder: Path) -> Path:
    for relative, content in FILES.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(content)
    return folder

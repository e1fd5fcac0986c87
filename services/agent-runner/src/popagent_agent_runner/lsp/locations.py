"""Server URIs shown to the model: repository-relative inside the repository, library references outside.

A location the server answers with is a `file://` URI of the host. Inside the repository's
real directory it becomes `src/app.py` (line and character 1-based, as the file tools count
lines). Anything else (typeshed, site-packages, node_modules of the pinned install, the
TypeScript lib files) becomes a library reference that keeps only what names the library
(`stdlib/builtins.pyi`, `typescript/lib/lib.es5.d.ts`), never the host path.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from lsprotocol import types
else:
    from popagent_agent_runner.lsp.protocol import types


# The last of these in a path starts the library's own name.
LIBRARY_MARKERS = ("site-packages", "dist-packages", "node_modules", "typeshed-fallback", "typeshed")
LIBRARY_PARTS_SHOWN = 2


def path_of_uri(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def uri_of(path: Path) -> str:
    return path.as_uri()


def relative_to_root(root: Path, uri: str) -> str | None:
    """The repository-relative path of `uri`, or None when it is not inside `root`."""
    path = path_of_uri(uri)
    if path is None:
        return None
    try:
        return PurePosixPath(path.relative_to(root)).as_posix()
    except ValueError:
        return None


def library_name(uri: str) -> str:
    """What names a location outside the repository, without the host's folders."""
    path = path_of_uri(uri)
    if path is None:
        return urlparse(uri).scheme + ":"
    parts = path.parts
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in LIBRARY_MARKERS and index + 1 < len(parts):
            return "/".join(parts[index + 1 :])
    # No library folder: the file and its folder's name only.
    return "/".join(parts[-LIBRARY_PARTS_SHOWN:])


def position_shown(position: types.Position) -> dict[str, int]:
    return {"line": position.line + 1, "character": position.character + 1}

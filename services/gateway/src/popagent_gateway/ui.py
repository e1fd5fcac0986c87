"""The built web UI (ui/dist), served publicly at `/`; only /api needs the key.

Files are served as the build's precompressed copies (`ui/scripts/precompress.mjs` writes a
`.br` and a `.gz` beside each compressible file) to clients that accept them, so the main
script crosses the network at about a quarter of its size and nothing is compressed per request.
The build's hashed assets (`assets/<name>-<hash>.<ext>`, a new name for new content) may be
cached for a year; everything else, `index.html` first, is revalidated on each load (its ETag),
so a new build is picked up at once.
"""

from __future__ import annotations

import mimetypes
import os
import re
import stat
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.routing import compile_path
from starlette.staticfiles import NotModifiedResponse
from starlette.types import ASGIApp, Receive, Scope, Send

DEFAULT_UI_DIR = Path(__file__).resolve().parents[4] / "ui" / "dist"
# The folder vite writes content-hashed files to.
HASHED_ASSETS = "assets"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# The copies precompress.mjs writes, in the order they are preferred.
PRECOMPRESSED = (("br", ".br"), ("gzip", ".gz"))


def accepted_encodings(header: str) -> set[str]:
    """The content codings an Accept-Encoding header accepts (RFC 9110 12.5.3; `q=0` refuses one)."""
    accepted: set[str] = set()
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        quality = params.strip().lower()
        if coding and not (quality.startswith("q=") and quality[2:].strip() in ("0", "0.", "0.0", "0.00", "0.000")):
            accepted.add(coding.strip().lower())
    return accepted


class PrecompressedFiles(StaticFiles):
    """The build's files, as a precompressed copy where the client accepts its coding, with a
    cache lifetime by kind (hashed assets: a year; the rest: revalidated)."""

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        request_headers = Headers(scope=scope)
        path = Path(full_path)
        headers = {
            "cache-control": IMMUTABLE if path.parent.name == HASHED_ASSETS else REVALIDATE,
            "vary": "Accept-Encoding",
        }
        accepted = accepted_encodings(request_headers.get("accept-encoding", ""))
        response: FileResponse | None = None
        for coding, suffix in PRECOMPRESSED:
            if coding not in accepted:
                continue
            copy = path.with_name(path.name + suffix)
            try:
                copy_stat = os.stat(copy)
            except OSError:
                continue
            if stat.S_ISREG(copy_stat.st_mode):
                media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                response = FileResponse(
                    copy,
                    status_code=status_code,
                    stat_result=copy_stat,
                    media_type=media_type,
                    headers={**headers, "content-encoding": coding},
                )
                break
        if response is None:
            response = FileResponse(full_path, status_code=status_code, stat_result=stat_result, headers=headers)
        if self.is_not_modified(response.headers, request_headers):
            return NotModifiedResponse(response.headers)
        return response


class UiFiles:
    """The static files, except under /api: a path there that reached this mount matched no
    /api route with its method, so it answers as the API would (405 with `Allow` when the
    path exists with other methods, else 404), never the static files' 404 `Allow: GET, HEAD`."""

    def __init__(self, app: FastAPI, files: ASGIApp) -> None:
        self.app = app
        self.files = files
        self._routes: list[tuple[re.Pattern[str], frozenset[str]]] | None = None

    def _allowed(self, path: str) -> set[str]:
        if self._routes is None:
            self._routes = [
                (compile_path(context.path)[0], frozenset(context.methods or ()))
                for context in iter_route_contexts(self.app.routes)
                if isinstance(context.original_route, APIRoute) and context.path
            ]
        return {method for pattern, methods in self._routes if pattern.match(path) for method in methods}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/api" or path.startswith("/api/")):
            await self.files(scope, receive, send)
            return
        allowed = self._allowed(path)
        if allowed:
            answer = JSONResponse({"error": "Method Not Allowed"}, 405, headers={"allow": ", ".join(sorted(allowed))})
        else:
            answer = JSONResponse({"error": "Not Found"}, 404)
        await answer(scope, receive, send)


def mount_ui(app: FastAPI, ui_dir: Path) -> bool:
    """Mount the UI when it has been built; the API works without it."""
    if not (ui_dir / "index.html").is_file():
        return False
    app.mount("/", UiFiles(app, PrecompressedFiles(directory=ui_dir, html=True)), name="ui")
    return True

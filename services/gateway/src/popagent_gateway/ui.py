"""The built web UI (ui/dist), served publicly at `/`; only /api needs the key."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.staticfiles import StaticFiles
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

DEFAULT_UI_DIR = Path(__file__).resolve().parents[4] / "ui" / "dist"


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
    app.mount("/", UiFiles(app, StaticFiles(directory=ui_dir, html=True)), name="ui")
    return True

"""The built web UI (ui/dist), served publicly at `/`; only /api needs the key."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

DEFAULT_UI_DIR = Path(__file__).resolve().parents[4] / "ui" / "dist"


def mount_ui(app: FastAPI, ui_dir: Path) -> bool:
    """Mount the UI when it has been built; the API works without it."""
    if not (ui_dir / "index.html").is_file():
        return False
    app.mount("/", StaticFiles(directory=ui_dir, html=True), name="ui")
    return True

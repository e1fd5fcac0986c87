"""What the UI's browser tests share: where the built UI, playwright-core and Chromium are, and
what is missing to run them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UI_DIST = REPO / "ui" / "dist"
PLAYWRIGHT = REPO / "ui" / "node_modules" / "playwright-core"
OUTPUT = REPO / "tests" / "output" / "ui"
CHROMIUM = Path(os.environ.get("POPAGENT_CHROMIUM", "/usr/bin/chromium"))


def prerequisites() -> list[str]:
    missing = []
    if not (UI_DIST / "index.html").is_file():
        missing.append(f"the built UI ({UI_DIST}/index.html): run `npm ci --prefix ui && npm --prefix ui run build`")
    if not PLAYWRIGHT.is_dir():
        missing.append(f"playwright-core ({PLAYWRIGHT}): run `npm ci --prefix ui`")
    if not CHROMIUM.is_file():
        missing.append(f"Chromium ({CHROMIUM}): run `apt-get install -y chromium`")
    if shutil.which("node") is None:
        missing.append("node")
    return missing

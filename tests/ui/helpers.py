"""What the UI's browser tests share: where the built UI, playwright-core and Chromium are, what is
missing to run them, the stack as `make run` starts it, and the scripted models' message text."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from popagent_dev.embedded import free_port
from popagent_dev.launcher import Stack, StackConfig

REPO = Path(__file__).resolve().parents[2]
UI_DIST = REPO / "ui" / "dist"
PLAYWRIGHT = REPO / "ui" / "node_modules" / "playwright-core"
OUTPUT = REPO / "tests" / "output" / "ui"
CHROMIUM = Path(os.environ.get("POPAGENT_CHROMIUM", "/usr/bin/chromium"))


async def drive(
    driver: Path, config: Path, settings: dict[str, Any], *, timeout_s: float, where: str = ""
) -> list[str]:
    """Run a browser driver script on `settings` (written to `config`) and the names of its steps,
    every one of which passed; `where` adds to the failure message where else to look."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(settings))  # noqa: ASYNC240 - a small local file, before the driver starts
    process = await asyncio.create_subprocess_exec(
        "node", str(driver), str(config), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    lines = stdout.decode().strip().splitlines()
    assert lines, f"the browser driver printed no report (exit {process.returncode}):\n{stderr.decode()[-3000:]}"
    steps = json.loads(lines[-1])["steps"]
    failed = [f"{s['step']}: {s['detail']}" for s in steps if not s["ok"]]
    assert not failed, (
        "browser steps failed:\n  "
        + "\n  ".join(failed)
        + f"\n(screenshots in {OUTPUT}{where})\n"
        + stderr.decode()[-2000:]
    )
    assert process.returncode == 0, stderr.decode()[-3000:]
    return [s["step"] for s in steps]


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


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message of a model request, whether its content is a string or parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def stack_environment(
    tmp_path: Path, *, dsn: str, nats_url: str, models_url: str, api_key: str, observability_dsn: str = ""
) -> dict[str, str]:
    """What every browser test's stack is started with: its database (and observability database,
    else the same), NATS, the scripted model gateway, its key, the built UI and a workspace root."""
    return {
        "DATABASE_URL": dsn,
        "OBSERVABILITY_DATABASE_URL": observability_dsn or dsn,
        "NATS_URL": nats_url,
        "NINEROUTER_URL": models_url,
        "POPAGENT_API_KEY": api_key,
        "POPAGENT_UI_DIR": str(UI_DIST),
        "POPAGENT_WORKSPACE_ROOT": str(tmp_path / "workspace"),
    }


@contextlib.asynccontextmanager
async def launched_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> AsyncIterator[Stack]:
    """The whole stack as `make run` starts it (the launcher), with `environment` set and its data in tmp_path."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    config = StackConfig(data_dir=tmp_path / "data", gateway_port=free_port(), echo_logs=False, start_timeout_s=120)
    running = Stack(config)
    async with running.running():
        yield running

"""The MCP and A2A server SDKs load in a gateway on the first request that needs them, never before
and never for a request without the key (interop.py): a gateway nobody calls that way stays lean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# A fresh interpreter: the suite's own process has both SDKs loaded by other tests.
PROBE = """
import json, sys
from fastapi.testclient import TestClient
from gateway.harness import offline_settings
from popagent_gateway.app import create_app

KEY = "interop-loading-key-" + "k" * 16
MCP_HEADERS = {"x-popagent-key": KEY, "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
steps = []

def step(name, status=None):
    steps.append({"step": name, "status": status, "loaded": sorted(m for m in ("mcp", "a2a") if m in sys.modules)})

with TestClient(create_app(offline_settings(KEY))) as client:
    step("started")
    step("keyless /mcp", client.post("/mcp", json={}).status_code)
    step("keyless /a2a", client.post("/a2a", json={}).status_code)
    step("agent card", client.get("/.well-known/agent-card.json").status_code)
    listed = client.post("/mcp", headers=MCP_HEADERS, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    step("tools/list", listed.status_code)
    # A second request reuses the transport the first one started.
    step("tools/list again", client.post("/mcp", headers=MCP_HEADERS, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).status_code)
sys.stdout.write("STEPS " + json.dumps(steps) + "\\n")
"""


def test_the_sdks_load_on_the_first_keyed_request_that_needs_them() -> None:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    [line] = [line for line in run.stdout.splitlines() if line.startswith("STEPS ")]
    steps = {step["step"]: (step["status"], step["loaded"]) for step in json.loads(line.removeprefix("STEPS "))}
    assert steps == {
        "started": (None, []),
        "keyless /mcp": (401, []),
        "keyless /a2a": (401, []),
        "agent card": (200, ["a2a"]),
        "tools/list": (200, ["a2a", "mcp"]),
        "tools/list again": (200, ["a2a", "mcp"]),
    }

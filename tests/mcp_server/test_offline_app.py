"""The gateway app with no services behind it (as tests/gateway/ builds it): its lifespan runs the MCP
server's session manager, and /mcp answers the protocol's own requests, which call no service."""

from __future__ import annotations

from fastapi.testclient import TestClient
from gateway.harness import offline_settings

from mcp_server.helpers import HANDSHAKE
from popagent_gateway.app import create_app

KEY = "offline-mcp-key-" + "o" * 16
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def test_the_app_serves_mcp_between_its_start_and_stop_and_only_with_the_key() -> None:
    # Entered twice: each app has a manager of its own (a manager runs once).
    for _ in range(2):
        with TestClient(create_app(offline_settings(KEY))) as client:
            refused = client.post("/mcp", json=INITIALIZE, headers=HEADERS)
            answered = client.post("/mcp", json=INITIALIZE, headers={**HEADERS, "authorization": f"Bearer {KEY}"})
            assert refused.status_code == 401
            assert answered.status_code == 200, answered.text
            assert '"protocolVersion":"2025-11-25"' in answered.text
            assert '"name":"popagent"' in answered.text
            # /mcp is no static file and no /api route: another method is refused by the route itself.
            assert client.put("/mcp", headers={"x-popagent-key": KEY}).status_code == 405

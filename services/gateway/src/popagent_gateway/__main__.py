"""`python -m popagent_gateway`: serve the HTTP API until SIGTERM (uvicorn behind the edge's
connection limits, popagent_gateway.serving)."""

from __future__ import annotations

import dataclasses

from popagent_core.log import configure_logging
from popagent_core.settings import load_settings
from popagent_core.telemetry import configure_telemetry, shutdown_telemetry
from popagent_gateway.app import create_app
from popagent_gateway.serving import GatewayServer, server_config, usable_connections
from popagent_gateway.settings import Settings


def main() -> None:
    settings = load_settings(Settings, "gateway")
    configure_logging("gateway", settings.log_level)
    configure_telemetry("gateway")
    limits = settings.edge_limits()
    limits = dataclasses.replace(limits, max_connections=usable_connections(limits.max_connections))
    try:
        app = create_app(settings, own_process=True)
        config = server_config(
            app,
            host=settings.host,
            port=settings.port,
            limits=limits,
            loop="uvloop",
            timeout_graceful_shutdown=5,
        )
        GatewayServer(config, app).run()
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()

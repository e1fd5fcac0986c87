"""`python -m popagent_gateway`: serve the HTTP API with uvicorn until SIGTERM."""

from __future__ import annotations

import uvicorn

from popagent_core.log import configure_logging
from popagent_core.settings import load_settings
from popagent_core.telemetry import configure_telemetry, shutdown_telemetry
from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings


def main() -> None:
    settings = load_settings(Settings, "gateway")
    configure_logging("gateway", settings.log_level)
    configure_telemetry("gateway")
    try:
        uvicorn.run(
            create_app(settings, own_process=True),
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()

"""`python -m popagent_gateway.openapi > openapi.json`: the OpenAPI document the UI is typed from.

Built from the app without starting it or reaching any service.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings

# The document depends on no setting; these only satisfy the required fields.
_PLACEHOLDER_DSN = "postgresql://openapi@127.0.0.1:1/openapi"


def document() -> dict[str, object]:
    required: dict[str, Any] = {"DATABASE_URL": _PLACEHOLDER_DSN, "OBSERVABILITY_DATABASE_URL": _PLACEHOLDER_DSN}
    settings = Settings(**required)
    return create_app(settings).openapi()


def main() -> None:
    sys.stdout.buffer.write(orjson.dumps(document(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


if __name__ == "__main__":
    main()

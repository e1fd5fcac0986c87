"""`python -m popagent_secrets [serve]`: run the secrets service until SIGTERM.
`python -m popagent_secrets reencrypt`: move every stored secret to the current key.
"""

from __future__ import annotations

import argparse
import sys

import orjson
import uvloop

from popagent_core.lifecycle import run
from popagent_core.log import configure_logging
from popagent_core.settings import load_settings
from popagent_secrets.reencrypt import run_reencrypt
from popagent_secrets.service import MIGRATIONS, build
from popagent_secrets.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m popagent_secrets")
    parser.add_argument("command", nargs="?", choices=("serve", "reencrypt"), default="serve")
    command = parser.parse_args(argv).command
    settings = load_settings(Settings, "secrets")
    if command == "serve":
        run("secrets", build, settings)
        return
    configure_logging("secrets", settings.log_level)
    report = uvloop.run(run_reencrypt(settings.database_url, settings.keyring(), MIGRATIONS))
    # One JSON line on stdout for scripts; the per-row log lines went to stderr.
    sys.stdout.write(orjson.dumps(report.as_dict()).decode() + "\n")
    if report.failed or report.remaining:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""`python -m popagent_tasks [serve | worker] [--executor module:attribute]`.

`serve` (the default) runs the whole service: API, scheduler, recovery and, with an
executor, the worker. `worker` runs the same without the API, for extra worker
processes next to a serving replica.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys

from popagent_core.lifecycle import run
from popagent_core.settings import load_settings
from popagent_tasks.service import build
from popagent_tasks.settings import Settings


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m popagent_tasks")
    parser.add_argument("role", nargs="?", choices=("serve", "worker"), default="serve")
    parser.add_argument("--executor", default="", help="module:attribute of the executor factory")
    args = parser.parse_args(argv)
    overrides = {"POPAGENT_TASKS_EXECUTOR": args.executor} if args.executor else {}
    settings = load_settings(Settings, "tasks", **overrides)
    factory = functools.partial(build, serve_api=args.role == "serve")

    @contextlib.asynccontextmanager
    async def service(settings: Settings):  # type: ignore[no-untyped-def]
        async with factory(settings) as running:
            yield running

    run("tasks", service, settings)


if __name__ == "__main__":
    main(sys.argv[1:])

"""The services a benchmark starts, as child processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from popagent_dev import embedded


def spawn(module: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`python -m module` with this environment, its output appended to `log`; it dies with the benchmark."""
    return subprocess.Popen(
        embedded.orphan_safe([sys.executable, "-m", module]),
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )

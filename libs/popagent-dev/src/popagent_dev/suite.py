"""`make test`'s runner: the suite once, and once more, whole, only when a test process crashed.

A pytest-xdist worker that dies (a native crash inside a library: SIGSEGV) fails no assertion:
the run ends there (`--max-worker-restart=0`; a replaced worker makes xdist 3.8's loadgroup
scheduler wait forever, pytest-xdist #1378) and its summary names the test the worker was
running. Such a run is repeated once, so one rare crash of a test process does not fail the
suite by itself; a second crash, or any failed test, fails it. Every crash is printed.

    python -m popagent_dev.suite -n 2 --dist loadgroup --max-worker-restart=0 [pytest arguments]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

# How xdist reports the test a dead worker was running (`DSession.handle_crashitem`).
CRASHED = "crashed while running"


def crashes_only(junit: Path) -> list[str]:
    """The tests whose worker crashed, when those crashes are the run's only failures; else []."""
    if not junit.exists():
        return []
    failures = [
        (case, outcome)
        for case in ElementTree.parse(junit).getroot().iter("testcase")
        for outcome in case
        if outcome.tag in ("failure", "error")
    ]
    crashed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case, outcome in failures
        if CRASHED in (outcome.get("message") or "") + (outcome.text or "")
    ]
    return crashed if failures and len(crashed) == len(failures) else []


def main(arguments: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *arguments]
    # pytest keeps the test modules it rewrote (assertions) as bytecode only where bytecode may be
    # written: with PYTHONDONTWRITEBYTECODE set (dev and CI machines) every worker parses and
    # rewrites all of tests/ again on each run.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="popagent-suite-") as folder:
        junit = Path(folder) / "run.xml"
        code = subprocess.call([*pytest, f"--junitxml={junit}"], env=environment)
        crashed = crashes_only(junit) if code != 0 else []
    if not crashed:
        return code
    sys.stdout.write(
        f"\nA test process crashed (no test failed) while running {', '.join(crashed)}: the suite runs once more.\n\n"
    )
    sys.stdout.flush()
    return subprocess.call(pytest, env=environment)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

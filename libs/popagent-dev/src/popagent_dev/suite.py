"""`make test`'s runner: the suite once, and once more, whole, only when a test process crashed.

A pytest-xdist worker that dies (a native crash inside a library: SIGSEGV) fails no assertion:
the run ends there (`--max-worker-restart=0`; a replaced worker makes xdist 3.8's loadgroup
scheduler wait forever, pytest-xdist #1378) and its summary names the test the worker was
running. Such a run is repeated once, so one rare crash of a test process does not fail the
suite by itself; a second crash, or any failed test, fails it. Every crash is printed.

Tests marked `slow` spend minutes waiting, not computing (a model silent for minutes): in an xdist
run that does not choose markers itself they run beside it, in a pytest process of their own, so
no worker idles through them; their output follows the run's, and a failure there fails the suite.

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
SLOW = "slow"
# pytest's exit code when the selection holds no test.
NO_TESTS = 5


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


def beside(arguments: list[str]) -> bool:
    """Whether the slow tests run beside the xdist run: only when it is one and picks no markers."""
    distributed = any(arg in ("-n", "--numprocesses") or arg.startswith(("-n", "--numprocesses=")) for arg in arguments)
    return distributed and not any(arg == "-m" or arg.startswith("-m") for arg in arguments)


def combined(codes: list[int]) -> int:
    """One exit code for runs over parts of one selection: a part with no test fails nothing."""
    failed = [code for code in codes if code not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return 0 if 0 in codes else NO_TESTS


def main(arguments: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *arguments]
    # pytest keeps the test modules it rewrote (assertions) as bytecode only where bytecode may be
    # written: with PYTHONDONTWRITEBYTECODE set (dev and CI machines) every worker parses and
    # rewrites all of tests/ again on each run.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="popagent-suite-") as folder:
        slow: subprocess.Popen[bytes] | None = None
        slow_output = Path(folder) / "slow.txt"
        if beside(arguments):
            pytest = [*pytest, "-m", f"not {SLOW}"]
            with slow_output.open("wb") as output:
                slow = subprocess.Popen(
                    [sys.executable, "-m", "pytest", *arguments, "-n", "0", "-m", SLOW],
                    env=environment,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
        try:
            code = run(pytest, environment, Path(folder) / "run.xml")
        finally:
            slow_code = slow.wait() if slow is not None else None
        if slow_code is None:
            return code
        sys.stdout.write(f"\nThe tests marked {SLOW}, run beside the rest:\n")
        sys.stdout.write(slow_output.read_text(errors="replace"))
        sys.stdout.flush()
        return combined([code, slow_code])


def run(pytest: list[str], environment: dict[str, str], junit: Path) -> int:
    """The run, and once more when its only failures were crashed test processes."""
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

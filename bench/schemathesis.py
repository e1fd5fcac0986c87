"""Schemathesis at the RELIABILITY row 14 bar: the suite's fuzz test (tests/api/test_schemathesis.py:
schemathesis's engine over every /api operation with all of its checks and the canary check, in
every phase: examples, coverage, fuzzing in both data modes, stateful) at 500 examples per
operation and mode instead of the suite's 5 (the examples and coverage phases are the same in
both; the fuzzing and stateful phases go a hundred times deeper here). Prints the wall time, the
machine's load beside it, and pytest's verdict (with the CLI's report of any failure).

    .venv/bin/python bench/schemathesis.py [--examples 500]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=500)
    args = parser.parse_args()
    env = {**os.environ, "POPAGENT_TEST_SCHEMATHESIS_EXAMPLES": str(args.examples)}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    command.append("tests/api/test_schemathesis.py")
    started = time.perf_counter()
    load_before = os.getloadavg()
    result = subprocess.run(command, cwd=REPO, env=env, check=False)
    load_after = os.getloadavg()
    print(
        f"schemathesis at {args.examples} examples per operation and mode: {time.perf_counter() - started:.0f} s"
        f" (load average 1/5/15 min before {'/'.join(f'{x:.1f}' for x in load_before)},"
        f" after {'/'.join(f'{x:.1f}' for x in load_after)}; {os.cpu_count()} cores)"
    )
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()

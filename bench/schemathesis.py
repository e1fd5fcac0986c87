"""Schemathesis at the RELIABILITY row 14 bar: the suite's fuzz test (tests/api/test_schemathesis.py:
every selected operation, both data modes, the stateful phase, the canary check) at 500 examples
per operation and mode instead of CI's count. Prints the wall time and pytest's verdict.

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
    result = subprocess.run(command, cwd=REPO, env=env, check=False)
    print(f"schemathesis at {args.examples} examples per operation and mode: {time.perf_counter() - started:.0f} s")
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()

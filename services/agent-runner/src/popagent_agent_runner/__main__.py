"""`python -m popagent_agent_runner`: run the agent-runner service until SIGTERM.
`python -m popagent_agent_runner repair [--dry-run]`: reconcile orphaned rows (`repair.py`)."""

import os
import sys

# The sandbox forks and execs bubblewrap from this gRPC process. gRPC core's fork handlers run in
# that child between fork and exec, where they can crash it while other threads are inside gRPC;
# no child of this process uses gRPC, so the handlers are turned off before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from popagent_agent_runner.service import build
from popagent_agent_runner.settings import Settings
from popagent_core.lifecycle import run
from popagent_core.settings import load_settings

if __name__ == "__main__":
    if sys.argv[1:2] == ["repair"]:
        from popagent_agent_runner.repair import main

        main(sys.argv[2:])
    else:
        run("agent-runner", build, load_settings(Settings, "agent-runner"))

"""`python -m popagent_agent_runner`: run the agent-runner service until SIGTERM."""

from popagent_agent_runner.service import build
from popagent_agent_runner.settings import Settings
from popagent_core.lifecycle import run
from popagent_core.settings import load_settings

if __name__ == "__main__":
    run("agent-runner", build, load_settings(Settings, "agent-runner"))

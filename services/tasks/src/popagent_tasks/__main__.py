"""`python -m popagent_tasks`: run the tasks service until SIGTERM."""

from popagent_core.lifecycle import run
from popagent_core.settings import load_settings
from popagent_tasks.service import build
from popagent_tasks.settings import Settings

if __name__ == "__main__":
    run("tasks", build, load_settings(Settings, "tasks"))

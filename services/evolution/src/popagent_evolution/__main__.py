"""`python -m popagent_evolution`: run the evolution service until SIGTERM."""

from popagent_core.lifecycle import run
from popagent_core.settings import load_settings
from popagent_evolution.service import build
from popagent_evolution.settings import Settings

if __name__ == "__main__":
    run("evolution", build, load_settings(Settings, "evolution"))

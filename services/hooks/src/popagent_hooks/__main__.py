"""`python -m popagent_hooks`: run the hooks service until SIGTERM."""

from popagent_core.lifecycle import run
from popagent_core.settings import load_settings
from popagent_hooks.service import build
from popagent_hooks.settings import Settings

if __name__ == "__main__":
    run("hooks", build, load_settings(Settings, "hooks"))

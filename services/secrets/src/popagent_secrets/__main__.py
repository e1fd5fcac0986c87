"""`python -m popagent_secrets`: run the secrets service until SIGTERM."""

from popagent_core.lifecycle import run
from popagent_core.settings import load_settings

from popagent_secrets.service import build
from popagent_secrets.settings import Settings

if __name__ == "__main__":
    run("secrets", build, load_settings(Settings, "secrets"))

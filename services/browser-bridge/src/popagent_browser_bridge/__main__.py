"""`python -m popagent_browser_bridge`: run the browser-bridge service until SIGTERM."""

from popagent_browser_bridge.service import build
from popagent_browser_bridge.settings import Settings
from popagent_core.lifecycle import run
from popagent_core.settings import load_settings

if __name__ == "__main__":
    run("browser-bridge", build, load_settings(Settings, "browser-bridge"))

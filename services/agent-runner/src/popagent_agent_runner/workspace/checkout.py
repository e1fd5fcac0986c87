"""The default workspace's checkout: `workspace/popagent` under `POPAGENT_WORKSPACE_ROOT`.

The seeded registration `popagent` points there. When the folder is absent, `make run` and
the compose entrypoint clone it from `POPAGENT_DEFAULT_WORKSPACE_SOURCE` (any git URL or
path; `make run` defaults to this repository itself, so a new user's agent can work on
popagent). The clone goes to a temporary folder beside the target and is renamed into
place, so a half-done clone never looks like a checkout. A failure is one line on stderr
and exit code 0: the stack starts anyway and the tools say the directory is missing.

    python -m popagent_agent_runner.workspace.checkout
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from popagent_agent_runner.workspace import git

DEFAULT_WORKSPACE_FOLDER = "popagent"
CLONE_TIMEOUT_S = 600.0


def ensure_default_checkout(root: Path, source: str, timeout_s: float = CLONE_TIMEOUT_S) -> str:
    """Clone `source` to `root/popagent` when it is absent; what happened, as one line."""
    target = root / DEFAULT_WORKSPACE_FOLDER
    if target.exists():
        return f"default workspace present: {target}"
    if not source:
        return f"default workspace not cloned: {target} is absent and POPAGENT_DEFAULT_WORKSPACE_SOURCE is not set"
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".popagent-clone-", dir=root))
    try:
        # The source is cloned like any untrusted repository (workspace/git.py); the one exception
        # is the user-level file that trusts a local source owned by another user (_trusting).
        trusting = _trusting(Path(source), staging) if Path(source).is_dir() else os.devnull
        done = git.run(
            "clone",
            "--quiet",
            "--",
            source,
            str(staging / "checkout"),
            home=staging,
            global_config=trusting,
            timeout_s=timeout_s,
        )
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or [f"git exited with {done.returncode}"])[-1]
            return f"default workspace not cloned from {source}: {reason}"
        try:
            (staging / "checkout").rename(target)
        except OSError:
            if target.exists():  # another process cloned it meanwhile
                return f"default workspace present: {target}"
            raise
        return f"default workspace cloned from {source} into {target}"
    except git.GitUnavailable:
        return f"default workspace not cloned: git is not installed ({target} is absent)"
    except subprocess.TimeoutExpired:
        return f"default workspace not cloned from {source}: git clone took longer than {timeout_s:.0f} s"
    except OSError as exc:
        return f"default workspace not cloned from {source}: {exc}"
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _trusting(source: Path, staging: Path) -> str:
    """A git configuration that trusts the local source repository. Compose mounts the host's
    checkout, owned by the host user, into a container running as another uid, and git refuses
    to read a repository of another owner ("dubious ownership") unless safe.directory names it
    in a global configuration (git before 2.42 ignores it on the command line). Only the
    source is trusted, and only for this clone; everything else stays as workspace/git.py sets it."""
    config = staging / "gitconfig"
    resolved = source.resolve()
    config.write_text(f"[safe]\n\tdirectory = {resolved}\n\tdirectory = {resolved / '.git'}\n")
    return str(config)


def main() -> None:
    root = Path(os.environ.get("POPAGENT_WORKSPACE_ROOT") or "workspace")
    line = ensure_default_checkout(root, os.environ.get("POPAGENT_DEFAULT_WORKSPACE_SOURCE", ""))
    print(line, file=sys.stderr if "not cloned" in line else sys.stdout, flush=True)


if __name__ == "__main__":
    main()

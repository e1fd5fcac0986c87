"""Every git command the service runs on the host, built one way: nothing a repository, the
service's environment or a user's configuration says can make git start another program.

A workspace's `.git` is written by whatever the agents ran in it, and a cloned repository
was written by whoever published it, so a host-side git command treats both as untrusted:

- Configuration comes only from the repository itself and the command line: no system file
  (`GIT_CONFIG_NOSYSTEM`), no user file (`GIT_CONFIG_GLOBAL`, `/dev/null` unless the caller
  gives one file of its own), no `GIT_*` variable of the service's environment (the child's
  environment is built from an allow-list, never inherited), a `HOME` of its own (a new
  empty folder unless the caller gives one).
- Every setting that names a program is set on the command line, which outranks the
  repository's configuration: hooks (`core.hooksPath=/dev/null`), `core.fsmonitor`,
  `core.sshCommand`, the askpass and credential helpers, the pager, and every filter, merge
  driver, remote program and credential helper the repository's configuration defines (read
  first, includes followed, each emptied by name). External diffs and textconv drivers are
  switched off by `--no-ext-diff --no-textconv` on the commands that show diffs.
- Transports: only git's known-safe ones (`file`, `git`, `http`, `https`, `ssh`); `ext::`
  and remote helpers are refused.
- Only builtin subcommands run (`SUBCOMMANDS`), and git never lets an alias shadow a
  builtin, so no `!` alias runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

GIT_TIMEOUT_S = 600.0

# What popagent runs on the host; each is a git builtin.
SUBCOMMANDS = frozenset(
    {
        "add",
        "checkout",
        "clone",
        "commit",
        "config",
        "diff",
        "fetch",
        "for-each-ref",
        "log",
        "ls-files",
        "merge-base",
        "rev-parse",
        "show",
        "status",
        "update-ref",
    }
)
# Those that may show a diff: an external diff (`diff.external`, `diff.<driver>.command`) and a
# textconv are switched off by option, since an empty setting is still a program to git.
SHOWING_DIFFS = frozenset({"diff", "log", "show"})

# Settings naming a program, or turning one on, that hold for every repository.
_OVERRIDES = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=ssh",
    "core.askPass=",
    "core.pager=cat",
    "core.editor=false",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.gitProxy=",
    # An empty helper resets the list the repository's configuration built.
    "credential.helper=",
    "sequence.editor=false",
    "log.showSignature=false",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.git.allow=always",
    "protocol.http.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.ext.allow=never",
    # No background program after a fetch or commit (auto gc, maintenance, commit-graph writes).
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.writeCommitGraph=false",
    "commit.gpgSign=false",
)

# Per-name settings of a repository's configuration that name a program (`filter.<driver>.clean`, ...).
_PROGRAM_KEY = re.compile(
    r"^(?:filter\..+\.(?:clean|smudge|process)"
    r"|diff\..+\.(?:textconv|command)"
    r"|merge\..+\.driver"
    r"|remote\..+\.(?:uploadpack|receivepack)"
    r"|credential\..+\.helper)$",
    re.IGNORECASE,
)


class GitUnavailable(Exception):
    """git is not installed on this host."""


def environment(home: Path, global_config: str = os.devnull) -> dict[str, str]:
    """The whole environment of a host-side git command (nothing else of the service's).

    `global_config`: the one user-level configuration file git reads; `/dev/null` unless a
    caller needs a setting that only that level takes (the clone's `safe.directory`).
    """
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": global_config,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        # Only the protocols allowed above, and only when popagent itself names them.
        "GIT_PROTOCOL_FROM_USER": "0",
    }


def command(git: str, subcommand: str, args: Sequence[str], program_keys: Sequence[str] = ()) -> list[str]:
    """The command line: the overrides, each of `program_keys` emptied, then the subcommand."""
    if subcommand not in SUBCOMMANDS:
        raise ValueError(f"git {subcommand!r} is not a subcommand popagent runs on the host")
    line = [git, "--no-pager"]
    for setting in (*_OVERRIDES, *(f"{key}=" for key in program_keys)):
        line += ["-c", setting]
    options = ["--no-ext-diff", "--no-textconv"] if subcommand in SHOWING_DIFFS else []
    return [*line, subcommand, *options, *args]


def _program_keys(git: str, repository: Path, env: dict[str, str], timeout_s: float) -> list[str]:
    """The settings of `repository`'s own configuration (includes followed) that name a program."""
    listed = subprocess.run(
        command(git, "config", ["--includes", "--name-only", "--list"]),
        cwd=repository,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return [key for key in listed.stdout.splitlines() if _PROGRAM_KEY.match(key)]


def run(
    subcommand: str,
    *args: str,
    repository: Path | None = None,
    home: Path | None = None,
    global_config: str = os.devnull,
    timeout_s: float = GIT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run `git <subcommand> <args>` on the host, its output captured as text.

    `repository`: the working tree the command runs in (its programs are emptied by name);
    None for a command that works on no existing repository (clone). `home`: the child's
    `HOME` (default: a new empty folder, removed afterwards).

    Raises:
        GitUnavailable: git is not installed.
        subprocess.TimeoutExpired: the command took longer than `timeout_s`.
    """
    git = shutil.which("git")
    if git is None:
        raise GitUnavailable("git is not installed")
    with tempfile.TemporaryDirectory(prefix="popagent-git-home-") as empty_home:
        env = environment(home or Path(empty_home), global_config)
        keys = _program_keys(git, repository, env, timeout_s) if repository is not None else []
        return subprocess.run(
            command(git, subcommand, args, keys),
            cwd=repository,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

"""Host-side git (workspace/git.py) runs nothing a repository or the environment configures.

The hostile repository is what the sandboxed shell could leave in a workspace's `.git`:
`core.fsmonitor`, hooks, a `!` alias, a filter and a textconv driver selected by its
`.gitattributes`, an external diff, a credential helper. Each program writes a file into
`ran/` (the canary folder). Every test first runs plain git on the same setup and checks
that something ran (so it can fail), then the service's way, which must run nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from popagent_agent_runner.workspace import git
from popagent_agent_runner.workspace.checkout import ensure_default_checkout
from support.git_fixtures import PLAIN_ENV, executable, marker, plain_git


def hostile_repository(folder: Path, ran: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (folder / "f.txt").write_text("one\n")
    plain_git("init", "-q", cwd=folder)
    plain_git("add", ".", cwd=folder)
    plain_git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "init", cwd=folder)
    config = {
        "core.fsmonitor": f"touch {ran}/fsmonitor; false",
        "alias.st": f"!touch {ran}/alias",
        "filter.evil.clean": marker(ran, "clean"),
        "filter.evil.smudge": marker(ran, "smudge"),
        "filter.evil.process": f"touch {ran}/process",
        "diff.evil.textconv": f"sh -c 'touch {ran}/textconv; cat \"$0\"'",
        "diff.external": f"sh -c 'touch {ran}/external'",
        "core.pager": f"sh -c 'touch {ran}/pager; cat'",
        "credential.helper": f"!touch {ran}/credential",
    }
    for key, value in config.items():
        plain_git("config", key, value, cwd=folder)
    for hook in ("post-checkout", "pre-commit", "post-index-change", "pre-auto-gc", "reference-transaction"):
        executable(folder / ".git" / "hooks" / hook, f"#!/bin/sh\ntouch {ran}/hook-{hook}\n")
    # A change, with a stale index entry, so status and diff have content to compare.
    (folder / "f.txt").write_text("one\ntwo\n")
    os.utime(folder / "f.txt", (1, 1))
    return folder


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    folder = tmp_path / "ran"
    folder.mkdir()
    return folder


def test_commands_in_a_hostile_repository_run_none_of_its_programs(tmp_path: Path, ran: Path) -> None:
    control = hostile_repository(tmp_path / "control", ran)
    for args in (["status"], ["diff"], ["log", "-p"], ["st"]):
        plain_git(*args, cwd=control)
    assert {"fsmonitor", "process", "alias"} <= {p.name for p in ran.iterdir()}, "plain git ran nothing: no test"
    shutil.rmtree(ran)
    ran.mkdir()

    repository = hostile_repository(tmp_path / "repository", ran)
    status = git.run("status", "--short", repository=repository)
    assert status.returncode == 0, status.stderr
    assert status.stdout == " M f.txt\n"
    diff = git.run("diff", repository=repository)
    assert diff.returncode == 0, diff.stderr
    assert "+two" in diff.stdout
    for args in (["log", "-p"], ["show"], ["ls-files"], ["rev-parse", "HEAD"]):
        assert git.run(*args, repository=repository).returncode == 0
    assert sorted(p.name for p in ran.iterdir()) == []


def test_only_builtin_subcommands_run(ran: Path, tmp_path: Path) -> None:
    """An alias never stands in for a command the service runs: only builtins are accepted."""
    repository = hostile_repository(tmp_path / "repository", ran)
    with pytest.raises(ValueError, match="not a subcommand"):
        git.run("st", repository=repository)
    assert list(ran.iterdir()) == []


def test_ext_transport_is_refused(ran: Path, tmp_path: Path) -> None:
    allowing = {**PLAIN_ENV, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.ext.allow"}
    plain_git(
        "clone", f"ext::sh -c touch% {ran}/ext", "x", cwd=tmp_path, env={**allowing, "GIT_CONFIG_VALUE_0": "always"}
    )
    assert (ran / "ext").exists(), "plain git ran nothing: no test"
    (ran / "ext").unlink()
    cloned = git.run("clone", f"ext::sh -c touch% {ran}/ext", str(tmp_path / "y"))
    assert cloned.returncode != 0
    assert list(ran.iterdir()) == []


def test_the_default_checkout_clone_runs_nothing_of_the_source_or_the_environment(
    tmp_path: Path, ran: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source carries every program of the hostile repository; the service's environment
    carries git configuration too (hooks and a filter through GIT_CONFIG_*, a template folder
    with hooks, a user configuration in $HOME)."""
    source = hostile_repository(tmp_path / "source", ran)
    templates = tmp_path / "templates"
    executable(templates / "hooks" / "post-checkout", f"#!/bin/sh\ntouch {ran}/template-hook\n")
    evil_hooks = tmp_path / "evil-hooks"
    executable(evil_hooks / "post-checkout", f"#!/bin/sh\ntouch {ran}/env-hook\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f'[filter "evil"]\n\tsmudge = {marker(ran, "home-smudge")}\n')
    hostile_env = {
        "HOME": str(home),
        "GIT_TEMPLATE_DIR": str(templates),
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": str(evil_hooks),
        "GIT_CONFIG_KEY_1": "core.fsmonitor",
        "GIT_CONFIG_VALUE_1": f"touch {ran}/env-fsmonitor; false",
    }
    plain_git("clone", "-q", str(source), "plain", cwd=tmp_path, env={"PATH": os.environ["PATH"], **hostile_env})
    assert list(ran.iterdir()), "plain git ran nothing: no test"
    shutil.rmtree(ran)
    ran.mkdir()

    for key, value in hostile_env.items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "workspace"
    line = ensure_default_checkout(root, str(source))
    assert line == f"default workspace cloned from {source} into {root / 'popagent'}"
    assert (root / "popagent" / "f.txt").read_text() == "one\n"
    assert sorted(p.name for p in ran.iterdir()) == []

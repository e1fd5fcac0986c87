"""Contained self-update's git (workspace/self_update.py) on real repositories: the registered
checkout stays byte-identical, only a verified descendant is imported as a local ref, nothing can be
pushed from the clone, and no repository-provided program runs on the host (a canary folder)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from popagent_agent_runner.context.containment import protected_path
from popagent_agent_runner.workspace import self_update as su
from support.git_fixtures import PLAIN_ENV, executable, git_out, marker, plain_git, registered_repository, snapshot


def attempt(tmp_path: Path, registered: Path, attempt_id: str = "t1-1") -> tuple[Path, str, su.Captured, str]:
    captured = su.capture(registered)
    clone = tmp_path / "clones" / attempt_id
    branch = su.prepare_clone(registered, clone, attempt_id, captured)
    return clone, branch, captured, su.clone_remotes_digest(clone)


def test_a_verified_descendant_is_imported_as_a_ref_and_the_checkout_stays_byte_identical(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    before = snapshot(registered)
    clone, branch, captured, remotes = attempt(tmp_path, registered)
    assert captured.branch == "main" and captured.commands == ("python3 -m pytest -q",)
    assert branch == "autonomous/self-update/t1-1"
    # No fetch URL anywhere; the one push URL leads nowhere.
    assert git_out("config", "--get-regexp", r"^remote\.", cwd=clone).strip() == f"remote.origin.pushurl {su.NOWHERE}"

    (clone / "app.py").write_text("print('hello, world')\n")
    assert su.commit_work(clone, "improve")
    verified = su.verify(registered, clone, branch, captured, remotes, protected_path)
    assert not verified.no_op and verified.changed_paths == ("app.py",)
    ref = su.import_ref(registered, clone, branch, "t1-1", verified.commit)

    assert ref == "refs/popagent/self-update/t1-1"
    assert git_out("rev-parse", ref, cwd=registered).strip() == verified.commit
    assert git_out("merge-base", "--is-ancestor", captured.head, ref, cwd=registered) == ""
    assert snapshot(registered) == before
    assert git_out("rev-parse", "HEAD", cwd=registered).strip() == captured.head
    assert "hello, world" in su.ref_diff(registered, "t1-1", captured.head)
    assert su.delete_ref(registered, "t1-1") and not su.delete_ref(registered, "t1-1")
    assert snapshot(registered) == before


def test_no_change_is_a_clean_no_op(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    clone, branch, captured, remotes = attempt(tmp_path, registered)
    assert not su.commit_work(clone, "nothing")
    assert su.verify(registered, clone, branch, captured, remotes, protected_path).no_op


def test_a_dirty_checkout_is_refused(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    (registered / "scratch.txt").write_text("untracked\n")
    with pytest.raises(su.SelfUpdateRefused, match="uncommitted change"):
        su.capture(registered)


@pytest.mark.parametrize(
    "path", [".github/workflows/ci.yml", ".env.local", "deploy/id_rsa", ".gitattributes", ".popagent/self-update.json"]
)
def test_a_diff_touching_a_protected_path_is_refused(tmp_path: Path, path: str) -> None:
    registered = registered_repository(tmp_path / "repo")
    clone, branch, captured, remotes = attempt(tmp_path, registered)
    (clone / path).parent.mkdir(parents=True, exist_ok=True)
    (clone / path).write_text("x\n")
    su.commit_work(clone, "sneak")
    with pytest.raises(su.SelfUpdateRefused, match="the change touches"):
        su.verify(registered, clone, branch, captured, remotes, protected_path)


def test_a_commit_that_is_not_a_descendant_is_refused(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    clone, branch, captured, remotes = attempt(tmp_path, registered)
    # An unrelated history on the prepared branch.
    plain_git("checkout", "-q", "--orphan", "other", cwd=clone)
    plain_git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "unrelated", cwd=clone)
    plain_git("branch", "-f", branch, "other", cwd=clone)
    plain_git("checkout", "-q", branch, cwd=clone)
    with pytest.raises(su.SelfUpdateRefused, match="not a descendant"):
        su.verify(registered, clone, branch, captured, remotes, protected_path)


def test_changed_remotes_are_refused_on_either_side(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    clone, branch, captured, remotes = attempt(tmp_path, registered)
    plain_git("remote", "add", "exfil", "https://example.invalid/x.git", cwd=clone)
    with pytest.raises(su.SelfUpdateRefused, match="clone's remotes changed"):
        su.verify(registered, clone, branch, captured, remotes, protected_path)
    plain_git("remote", "remove", "exfil", cwd=clone)
    plain_git("remote", "set-url", "origin", "https://example.invalid/other.git", cwd=registered)
    with pytest.raises(su.SelfUpdateRefused, match="registered repository's remotes changed"):
        su.verify(registered, clone, branch, captured, remotes, protected_path)


def test_push_from_the_clone_fails(tmp_path: Path) -> None:
    registered = registered_repository(tmp_path / "repo")
    clone, _, _, _ = attempt(tmp_path, registered)
    before = git_out("for-each-ref", cwd=registered)
    # No upstream, push.default=nothing: a bare push names nothing.
    bare = subprocess.run(["git", "push"], cwd=clone, env=PLAIN_ENV, capture_output=True, text=True, timeout=60)
    # The only remote has a push URL that leads nowhere (and no fetch URL).
    named = subprocess.run(
        ["git", "push", "origin", "HEAD:refs/heads/main"],
        cwd=clone,
        env=PLAIN_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode != 0 and named.returncode != 0, (bare.stderr, named.stderr)
    assert git_out("for-each-ref", cwd=registered) == before


def test_a_hostile_repository_runs_no_program_of_its_own(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    ran.mkdir()
    registered = registered_repository(tmp_path / "repo")
    (registered / ".gitattributes").write_text("* filter=evil diff=evil\n")
    plain_git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qam", "attrs", cwd=registered)
    plain_git("add", ".gitattributes", cwd=registered)
    plain_git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "attrs", cwd=registered)
    for key, value in {
        "core.fsmonitor": f"touch {ran}/fsmonitor; false",
        "filter.evil.clean": marker(ran, "clean"),
        "filter.evil.smudge": marker(ran, "smudge"),
        "filter.evil.process": f"touch {ran}/process",
        "diff.evil.textconv": f"sh -c 'touch {ran}/textconv; cat \"$0\"'",
        "uploadpack.packObjectsHook": f"touch {ran}/packobjects",
        "core.pager": f"sh -c 'touch {ran}/pager; cat'",
    }.items():
        plain_git("config", key, value, cwd=registered)
    for hook in ("post-checkout", "pre-commit", "post-commit", "reference-transaction", "pre-auto-gc", "post-merge"):
        executable(registered / ".git" / "hooks" / hook, f"#!/bin/sh\ntouch {ran}/hook-{hook}\n")
    # The control: plain git on this repository runs its programs, so the canary can see it.
    plain_git("status", cwd=registered)
    assert any(ran.iterdir()), "plain git ran nothing: no test"
    for each in ran.iterdir():
        each.unlink()

    clone, branch, captured, remotes = attempt(tmp_path, registered)
    (clone / "app.py").write_text("print('changed')\n")
    su.commit_work(clone, "change")
    verified = su.verify(registered, clone, branch, captured, remotes, protected_path)
    su.import_ref(registered, clone, branch, "t1-1", verified.commit)
    su.ref_diff(registered, "t1-1", captured.head)
    su.delete_ref(registered, "t1-1")
    assert sorted(p.name for p in ran.iterdir()) == []
    assert os.listdir(clone / ".git" / "popagent-no-hooks") == []

"""Git for contained self-update: the registered checkout is read, cloned and, at the end, receives one
local ref; everything else happens in a clone nobody can push from.

- `capture` refuses a dirty checkout and records its HEAD, branch and a digest of its remotes.
- `prepare_clone` makes a local clone of the captured HEAD on `autonomous/self-update/<id>`, removes
  its remote, points `core.hooksPath` at an empty folder, turns `core.fsmonitor` off and sets a push
  URL that leads nowhere with `push.default=nothing`: a push fails there even before the sandbox (no
  network, `.git` read-only) refuses it.
- `commit_work` commits what the agents changed (the runtime commits; the agents cannot write `.git`).
- `verify` accepts only a clean no-op or a clean descendant of the captured HEAD on the prepared
  branch, with unchanged remotes on both sides and every changed path allowed.
- `import_ref` fetches the verified commit into the registered repository as
  `refs/popagent/self-update/<id>`: no working tree, index or HEAD changes.

Every command goes through `workspace.git.run`, which keeps any repository-provided program from
running on the host.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from popagent_agent_runner.workspace import git

BRANCH_PREFIX = "autonomous/self-update/"
REF_PREFIX = "refs/popagent/self-update/"
# Where a repository declares the commands self-update may run (read from the captured HEAD only).
POLICY_FILE = ".popagent/self-update.json"
MAX_POLICY_BYTES = 16 * 1024
MAX_COMMANDS = 20
MAX_COMMAND_CHARS = 500
NOWHERE = "/dev/null/popagent-self-update-never-pushes"
AUTHOR = ("popagent self-update", "self-update@popagent.invalid")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class SelfUpdateRefused(Exception):
    """The attempt cannot go on; the message says why (shown to the user, never retried)."""


@dataclass(frozen=True)
class Captured:
    head: str
    branch: str
    remotes_digest: str
    # The commands the repository declares at HEAD (POLICY_FILE), normalized.
    commands: tuple[str, ...]


@dataclass(frozen=True)
class Verified:
    commit: str  # the prepared branch's head; == captured head for a no-op
    no_op: bool
    changed_paths: tuple[str, ...]
    diff_stat: str


def check_id(attempt_id: str) -> str:
    if not _ID.match(attempt_id) or ".." in attempt_id or attempt_id.endswith((".lock", ".")):
        raise SelfUpdateRefused(f"{attempt_id!r} cannot name a self-update branch")
    return attempt_id


def _git(repository: Path | None, *args: str) -> str:
    done = git.run(args[0], *args[1:], repository=repository)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SelfUpdateRefused(f"git {args[0]} failed: {detail}")
    return done.stdout


def normalize_command(command: str) -> str:
    return " ".join(command.split())


def remotes_digest(repository: Path) -> str:
    """A digest of every `remote.*` setting of the repository's own configuration."""
    done = git.run("config", "--local", "--get-regexp", r"^remote\.", repository=repository)
    # Exit 1: no remote setting at all.
    if done.returncode not in (0, 1):
        raise SelfUpdateRefused(f"the remotes of {repository} cannot be read: {done.stderr.strip()}")
    return hashlib.sha256(done.stdout.encode()).hexdigest()


def _declared_commands(repository: Path, head: str) -> tuple[str, ...]:
    done = git.run("show", f"{head}:{POLICY_FILE}", repository=repository)
    if done.returncode != 0:
        return ()
    if len(done.stdout.encode()) > MAX_POLICY_BYTES:
        raise SelfUpdateRefused(f"{POLICY_FILE} is larger than {MAX_POLICY_BYTES} bytes")
    try:
        declared = json.loads(done.stdout)
    except ValueError as exc:
        raise SelfUpdateRefused(f"{POLICY_FILE} is not JSON: {exc}") from None
    commands = declared.get("commands", []) if isinstance(declared, dict) else None
    if not isinstance(commands, list) or len(commands) > MAX_COMMANDS:
        raise SelfUpdateRefused(f"{POLICY_FILE}: 'commands' must be a list of at most {MAX_COMMANDS} strings")
    found: list[str] = []
    for command in commands:
        if not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND_CHARS:
            raise SelfUpdateRefused(f"{POLICY_FILE}: every command is a string of 1-{MAX_COMMAND_CHARS} characters")
        found.append(normalize_command(command))
    return tuple(found)


def capture(registered: Path) -> Captured:
    """The registered checkout's state; refuses a dirty one (untracked files included)."""
    if not (registered / ".git").exists():
        raise SelfUpdateRefused(f"{registered.name} is not a Git repository")
    status = _git(registered, "status", "--porcelain=v1", "--untracked-files=all", "--ignore-submodules=none")
    if status.strip():
        count = len(status.strip().splitlines())
        raise SelfUpdateRefused(
            f"the registered checkout has {count} uncommitted change(s); self-update needs a clean checkout"
        )
    head = _git(registered, "rev-parse", "--verify", "HEAD^{commit}").strip()
    branch_done = git.run("rev-parse", "--abbrev-ref", "HEAD", repository=registered)
    branch = branch_done.stdout.strip() if branch_done.returncode == 0 else "HEAD"
    return Captured(head, branch, remotes_digest(registered), _declared_commands(registered, head))


def prepare_clone(registered: Path, clone: Path, attempt_id: str, captured: Captured) -> str:
    """A fresh local clone at `clone` on `autonomous/self-update/<attempt_id>` at the captured HEAD;
    returns the branch name. An existing folder there (a previous attempt's) is removed first."""
    branch = BRANCH_PREFIX + check_id(attempt_id)
    remove_clone(clone)
    clone.parent.mkdir(parents=True, exist_ok=True)
    _git(None, "clone", "--quiet", "--no-hardlinks", "--no-checkout", "--", str(registered), str(clone))
    _git(clone, "config", "--remove-section", "remote.origin")
    hooks = clone / ".git" / "popagent-no-hooks"
    hooks.mkdir()
    for key, value in (
        ("core.hooksPath", str(hooks)),
        ("core.fsmonitor", "false"),
        ("push.default", "nothing"),
        ("remote.origin.pushurl", NOWHERE),
        ("user.name", AUTHOR[0]),
        ("user.email", AUTHOR[1]),
    ):
        _git(clone, "config", "--local", key, value)
    _git(clone, "checkout", "--quiet", "-b", branch, captured.head)
    return branch


def clone_remotes_digest(clone: Path) -> str:
    return remotes_digest(clone)


def commit_work(clone: Path, message: str) -> bool:
    """Commit every change in the clone's working tree on its branch; False: nothing changed."""
    _git(clone, "add", "--all", "--", ".")
    staged = git.run("diff", "--cached", "--quiet", repository=clone)
    if staged.returncode == 0:
        return False
    _git(clone, "commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", message)
    return True


def verify(
    registered: Path,
    clone: Path,
    branch: str,
    captured: Captured,
    expected_clone_remotes: str,
    allowed: Callable[[str], str | None],
) -> Verified:
    """Accept a clean no-op or a clean descendant commit of the captured HEAD on the prepared branch,
    with unchanged remotes and every changed path allowed; anything else raises SelfUpdateRefused."""
    if remotes_digest(registered) != captured.remotes_digest:
        raise SelfUpdateRefused("the registered repository's remotes changed during the attempt")
    if remotes_digest(clone) != expected_clone_remotes:
        raise SelfUpdateRefused("the clone's remotes changed during the attempt")
    current = _git(clone, "rev-parse", "--abbrev-ref", "HEAD").strip()
    if current != branch:
        raise SelfUpdateRefused(f"the clone is on {current!r}, not the prepared branch {branch!r}")
    if _git(clone, "status", "--porcelain=v1", "--untracked-files=all").strip():
        raise SelfUpdateRefused("the clone has uncommitted changes after the commit")
    commit = _git(clone, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}").strip()
    if commit == captured.head:
        return Verified(commit, True, (), "")
    ancestor = git.run("merge-base", "--is-ancestor", captured.head, commit, repository=clone)
    if ancestor.returncode != 0:
        raise SelfUpdateRefused(f"{commit[:12]} is not a descendant of the captured HEAD {captured.head[:12]}")
    names = _git(clone, "diff", "--no-renames", "--name-only", "-z", captured.head, commit)
    changed = tuple(sorted(name for name in names.split("\0") if name))
    for path in changed:
        problem = allowed(path)
        if problem is not None:
            raise SelfUpdateRefused(f"the change touches {path!r}: {problem}")
    stat = _git(clone, "diff", "--no-renames", "--stat", captured.head, commit).strip()
    return Verified(commit, False, changed, stat)


def import_ref(registered: Path, clone: Path, branch: str, attempt_id: str, commit: str) -> str:
    """Fetch the verified commit into the registered repository as a local ref; returns the ref."""
    ref = REF_PREFIX + check_id(attempt_id)
    _git(
        registered,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        "--",
        str(clone),
        f"+refs/heads/{branch}:{ref}",
    )
    imported = _git(registered, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    if imported != commit:
        raise SelfUpdateRefused(f"{ref} is {imported[:12]}, not the verified {commit[:12]}")
    return ref


def ref_diff(registered: Path, attempt_id: str, base: str) -> str:
    ref = REF_PREFIX + check_id(attempt_id)
    return _git(registered, "diff", "--no-renames", f"{base}", ref)


def delete_ref(registered: Path, attempt_id: str) -> bool:
    ref = REF_PREFIX + check_id(attempt_id)
    if git.run("rev-parse", "--verify", "--quiet", ref, repository=registered).returncode != 0:
        return False
    _git(registered, "update-ref", "-d", ref)
    return True


def remove_clone(clone: Path) -> None:
    shutil.rmtree(clone, ignore_errors=True)

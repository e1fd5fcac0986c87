"""`.gitignore` rules as git reads them, for listings and grep (gitignore(5)).

Supported: comments, blank lines, `!` negation, a trailing `/` for directories only, a
leading or inner `/` anchoring the pattern to the file's folder, `*`, `?`, `[...]` and
`**` (`**/x`, `x/**`, `a/**/b`), backslash escapes. Walks prune an ignored directory, so,
as in git, nothing below it can be re-included.

Globs become RE2 expressions (`workspace/patterns.py`): a `.gitignore` is a workspace file
and an include glob is a model's argument, and `*a*a*a*…b` against a long name backtracks
for hours in a backtracking engine; RE2 matches in time linear in the name. A rule whose
bracket expression RE2 refuses (`[z-a]`) is left out, as git leaves out what it cannot use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from popagent_agent_runner.workspace import patterns


@dataclass(frozen=True)
class Rule:
    regex: patterns.Regex
    negate: bool
    dir_only: bool
    # Anchored rules match the path relative to `base`; others match the last component.
    anchored: bool
    base: tuple[str, ...]


def _translate(glob: str) -> str:
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        char = glob[i]
        if char == "*":
            if glob.startswith("**", i):
                before_ok = i == 0 or glob[i - 1] == "/"
                after = glob[i + 2 : i + 3]
                if before_ok and after == "/":
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                if before_ok and after == "":
                    out.append(".*")
                    i += 2
                    continue
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(patterns.escape(char))
                i += 1
                continue
            body = glob[i + 1 : end]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
            i = end + 1
        elif char == "\\" and i + 1 < n:
            out.append(patterns.escape(glob[i + 1]))
            i += 2
        else:
            out.append(patterns.escape(char))
            i += 1
    return "".join(out)


def glob_source(glob: str) -> str:
    """A path glob (`*` within a component, `**` across them) as RE2 source for a full match."""
    return _translate(glob)


def glob_regex(glob: str) -> patterns.Regex:
    """A path glob as a compiled full-match expression; `patterns.PatternError` for a bracket
    expression RE2 refuses."""
    return patterns.compile(_translate(glob))


def parse(text: str, base: tuple[str, ...] = ()) -> list[Rule]:
    rules: list[Rule] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        # Trailing spaces are dropped unless escaped.
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        if not line:
            continue
        negate = line.startswith("!")
        if negate or line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        try:
            regex = patterns.compile(_translate(line))
        except patterns.PatternError:
            continue
        rules.append(Rule(regex, negate, dir_only, anchored, base))
    return rules


def ignored(rules: Sequence[Rule], parts: tuple[str, ...], is_dir: bool) -> bool:
    """Whether the path `parts` (repository-relative) is ignored: the last matching rule decides."""
    verdict = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        depth = len(rule.base)
        if parts[:depth] != rule.base or len(parts) <= depth:
            continue
        subject = "/".join(parts[depth:]) if rule.anchored else parts[-1]
        if rule.regex.fullmatch(subject):
            verdict = not rule.negate
    return verdict

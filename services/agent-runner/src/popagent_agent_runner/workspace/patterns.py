"""Regular expressions on patterns a model or a workspace file wrote: RE2, never `re`.

Python's `re` backtracks: `(a+)+$` over 28 bytes took 12 s and doubles with each character,
and `*a*a*a*…b` as a glob is polynomial with a large exponent; its matching also holds the
GIL, so a worker thread stalls the event loop, and it cannot be stopped. RE2 (Google's
engine, through the `google-re2` binding) matches in time linear in the text, in memory
bounded by `MAX_MEM` an expression, and releases the GIL while it matches.

Its syntax is Python's for everything but what needs backtracking: no backreferences and no
lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`); `\\z` ends the text (Python's `\\Z`). A pattern
it refuses is a `PatternError` whose text says why.
"""

from __future__ import annotations

from typing import Protocol

import re2

# Each compiled expression's budget (its program and the DFA states it builds as it matches);
# past it RE2 falls back to its slower, still linear, NFA. The binding caches 128 expressions.
MAX_MEM = 4 * 1024 * 1024


class PatternError(ValueError):
    """RE2 refused the pattern (its syntax, or a program larger than `MAX_MEM`)."""


class Match(Protocol):
    def start(self, group: int = 0) -> int: ...

    def end(self, group: int = 0) -> int: ...


class Regex(Protocol):
    def search(self, text: bytes, pos: int | None = None, endpos: int | None = None) -> Match | None: ...

    def fullmatch(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None: ...


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEM
    # The binding's RE2 would write every refused pattern to stderr.
    options.log_errors = False
    return options


_OPTIONS = _options()


def compile(pattern: str) -> Regex:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise PatternError(text) from None


def escape(text: str) -> str:
    """`text` as an expression matching exactly it."""
    return re2.escape(text)

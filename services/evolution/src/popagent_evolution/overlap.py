"""Whether reflection's words repeat the evidence it read: learned text never quotes a turn.

The evidence of a signal (the user's goal, tool output, error text) may be written by
whoever the agent read: a web page, a cloned repository, the user. Reflection's lesson is
meant to name the pattern the failures share in its own words, so a lesson that repeats
a stretch of any claimed signal's evidence is refused instead of written.

Two measures, both on NFKC-normalized, case-folded text:

- words: a run of `MAX_SHARED_WORDS + 1` (five) consecutive words that also occur
  consecutively in a goal or an evidence text. Four-word runs are what a paraphrase of the
  same failure naturally shares ("ran out of context", "the model provider rejected");
  from five words on a lesson quotes rather than describes, and the imperative an attacker
  needs ("ignore all previous instructions and ...") does not fit in four words together
  with its object. Shorter imperatives ("run cat .env") are the screen's to refuse.
- characters: a shared substring of more than `MAX_SHARED_CHARS` characters, which catches
  what word runs miss: one long token copied whole (an encoded payload, a hidden URL),
  or text whose words are glued together by punctuation.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from difflib import SequenceMatcher

MAX_SHARED_WORDS = 4
MAX_SHARED_CHARS = 40

_WORD = re.compile(r"\w+")


def _normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _runs(words: list[str], length: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + length]) for i in range(len(words) - length + 1)}


def quoted_run(text: str, sources: Iterable[str]) -> str | None:
    """How `text` quotes one of `sources` (a phrase that follows "it ..."), or None when it does not."""
    mine = _normalized(text)
    my_runs = _runs(_WORD.findall(mine), MAX_SHARED_WORDS + 1)
    for source in sources:
        theirs = _normalized(source)
        if my_runs & _runs(_WORD.findall(theirs), MAX_SHARED_WORDS + 1):
            return f"repeats more than {MAX_SHARED_WORDS} words in a row of the evidence it was learned from"
        matcher = SequenceMatcher(None, mine, theirs, autojunk=False)
        if matcher.find_longest_match(0, len(mine), 0, len(theirs)).size > MAX_SHARED_CHARS:
            return f"repeats more than {MAX_SHARED_CHARS} characters in a row of the evidence it was learned from"
    return None

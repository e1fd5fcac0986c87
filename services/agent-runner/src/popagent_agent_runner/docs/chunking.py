"""Markdown into chunks: the heading structure first, then size-bounded pieces of each section.

Splitter: semchunk 4.1. It is small (tqdm is its one dependency, quick to import), needs no model or tokenizer download when given a counter (we count characters),
and splits at the largest structural boundary that fits (blank-line runs, then lines, then
sentences, then words), so a piece of a section stays a readable paragraph. chonkie's
recursive chunker was as fast but pulls numpy and two Rust wheels (116 MB) and its Markdown
recipe reaches for the Hugging Face hub; semchunk is not heading-aware, so the headings are
parsed here (ATX `#` headings outside fenced code) and semchunk runs inside each section.

Each chunk keeps its heading path (`("Deploy", "Compose", "SearXNG")`); what is embedded and
full-text indexed is the path plus the text, so a section's heading finds its body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from semchunk.semchunk import chunk as semantic_chunks  # the package re-exports it without `__all__`

__all__ = ["MAX_CHUNK_CHARS", "Chunk", "chunk_markdown", "embedding_text", "sections"]

MAX_CHUNK_CHARS = 1500
"""About 350 tokens of English: small enough to point at one passage, large enough to carry its context."""
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Chunk:
    ordinal: int
    heading_path: tuple[str, ...]
    content: str


def sections(text: str) -> list[tuple[tuple[str, ...], str]]:
    """(heading path, body) of each section in order; text before the first heading has the empty path.

    A heading's own line is not in its body (the path carries it). Lines inside fenced code are
    never headings (a `# comment` in a shell block stays code).
    """
    found: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            found[-1][1].append(line)
            continue
        if opening:
            fence = opening.group(1)
            found[-1][1].append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading.group(2).strip().replace("\x1f", " ")))
            found.append((tuple(title for _, title in stack), []))
            continue
        found[-1][1].append(line)
    return [(path, "\n".join(lines).strip()) for path, lines in found]


def chunk_markdown(text: str, *, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """The chunks of a Markdown document: each section cut into pieces of at most `max_chars`.

    A heading with no body of its own still gives a chunk (its path alone), so a question
    naming a section finds it even when its text sits in the subsections.
    """
    chunks: list[Chunk] = []
    for path, body in sections(text):
        if not body:
            if path:
                chunks.append(Chunk(len(chunks), path, ""))
            continue
        pieces = [body] if len(body) <= max_chars else semantic_chunks(body, max_chars, len, memoize=False)
        for piece in pieces:
            piece = str(piece).strip()
            if piece:
                chunks.append(Chunk(len(chunks), path, piece))
    return chunks


def embedding_text(title: str, chunk: Chunk) -> str:
    """What a chunk is embedded as: the document's title, its heading path, then its text."""
    head = " > ".join(part for part in (title, *chunk.heading_path) if part)
    return f"{head}\n\n{chunk.content}" if chunk.content else head

"""Markdown chunking: heading paths, fenced code, the size bound (semchunk), titles."""

from __future__ import annotations

import pytest

from popagent_agent_runner.docs.chunking import chunk_markdown, embedding_text, sections
from popagent_agent_runner.docs.indexer import check_globs, document_title
from popagent_core.errors import InvalidArgument

DOC = """Intro before any heading.

# Guide

Welcome.

## Install

```sh
# not a heading: a shell comment
pip install popagent
```

### From source ###

Clone it.

## Usage

Run it.

# Appendix
"""


def test_sections_follow_the_heading_tree_and_ignore_hashes_in_code() -> None:
    paths = [path for path, _ in sections(DOC)]
    assert paths == [
        (),
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "From source"),
        ("Guide", "Usage"),
        ("Appendix",),
    ]
    install = dict(sections(DOC))[("Guide", "Install")]
    assert "# not a heading" in install and "pip install popagent" in install


def test_chunks_keep_their_heading_path_and_a_heading_without_text_still_counts() -> None:
    chunks = chunk_markdown(DOC)
    assert [chunk.ordinal for chunk in chunks] == list(range(len(chunks)))
    assert chunks[0].heading_path == () and chunks[0].content == "Intro before any heading."
    assert chunks[-1].heading_path == ("Appendix",) and chunks[-1].content == ""
    assert embedding_text("docs/guide.md", chunks[-1]) == "docs/guide.md > Appendix"
    assert embedding_text("docs/guide.md", chunks[1]) == "docs/guide.md > Guide\n\nWelcome."


def test_a_long_section_is_cut_into_bounded_pieces_at_paragraphs_and_loses_no_text() -> None:
    paragraphs = [f"Paragraph {n} " + "word " * 60 for n in range(30)]
    chunks = chunk_markdown("# Long\n\n" + "\n\n".join(paragraphs), max_chars=500)
    assert len(chunks) > 5 and all(len(chunk.content) <= 500 for chunk in chunks)
    assert all(chunk.heading_path == ("Long",) for chunk in chunks)
    joined = " ".join(chunk.content for chunk in chunks).split()
    assert joined == " ".join(paragraphs).split()
    assert all(chunk.content.startswith("Paragraph") for chunk in chunks)


def test_titles_and_glob_checks() -> None:
    assert document_title("a/b.md", "text\n# Title\n## Sub") == "Title"
    assert document_title("a/b.md", "## Only a subheading\n### Below") == "Only a subheading"
    assert document_title("a/b.md", "No heading at all.") == "b.md"
    assert check_globs(["**/*.md", "docs/**"], "include") == ("**/*.md", "docs/**")
    for bad in ("/etc/*.md", "../**", "a/../b", "", "x" * 201):
        with pytest.raises(InvalidArgument, match="include"):
            check_globs([bad], "include")
    with pytest.raises(InvalidArgument, match="at most 32"):
        check_globs(["*.md"] * 33, "include")

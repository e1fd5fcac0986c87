"""What an uploaded file is, decided from its bytes (never from the uploader's name or type).

Kept: the images models take (PNG, JPEG, GIF, WebP), PDF, and UTF-8 text. Text is typed from
the file name's extension among a few plain types only; nothing is ever typed as HTML, SVG or
script, so a download can never render as a page.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from popagent_core.errors import InvalidArgument

IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
PDF = "application/pdf"
TEXT_TYPES = {
    ".json": "application/json",
    ".csv": "text/csv",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
}
PLAIN = "text/plain"
ALLOWED = "PNG, JPEG, GIF or WebP images, PDF, or UTF-8 text (plain text, Markdown, CSV, JSON, source code)"


def is_image(media_type: str) -> bool:
    return media_type.startswith("image/")


def is_text(media_type: str) -> bool:
    return media_type == PLAIN or media_type in TEXT_TYPES.values()


def sniff(filename: str, content: bytes) -> str:
    """The media type of an upload; InvalidArgument for anything not kept."""
    for signature, media_type in IMAGE_SIGNATURES:
        if content.startswith(signature):
            return media_type
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    if content.startswith(b"%PDF-"):
        return PDF
    if b"\x00" not in content:
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return TEXT_TYPES.get(PurePosixPath(filename).suffix.lower(), PLAIN)
    raise InvalidArgument(f"{filename!r} is not a file type chat takes: attach {ALLOWED}")

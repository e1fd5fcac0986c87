"""The built UI crosses the network compressed (issue 42): the build's precompressed copies are
served to clients that accept them, hashed assets are cached for a year and everything else is
revalidated. Against the real build (`make setup` builds it, precompressed copies included)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.harness import offline_settings
from popagent_gateway.app import create_app
from popagent_gateway.ui import DEFAULT_UI_DIR, accepted_encodings

API_KEY = "u" * 32


@pytest.fixture(scope="module")
def client() -> TestClient:
    assert (DEFAULT_UI_DIR / "index.html").is_file(), "no UI build: run `make setup`"
    return TestClient(create_app(offline_settings(API_KEY, POPAGENT_UI_DIR=str(DEFAULT_UI_DIR))))


def main_script() -> str:
    """The path of the entry script index.html loads."""
    [path] = re.findall(r'<script[^>]* src="(/assets/index-[^"]+\.js)"', (DEFAULT_UI_DIR / "index.html").read_text())
    return path


def raw_get(client: TestClient, path: str, **headers: str) -> tuple[dict[str, str], bytes, int]:
    """Status, headers and the body as it crossed the wire (not decoded)."""
    with client.stream("GET", path, headers=headers) as response:
        return dict(response.headers), b"".join(response.iter_raw()), response.status_code


def test_the_main_script_is_sent_as_brotli_to_a_browser_and_as_gzip_or_plain_to_others(client: TestClient) -> None:
    path = main_script()
    original = (DEFAULT_UI_DIR / path.lstrip("/")).read_bytes()

    headers, body, status = raw_get(client, path, **{"accept-encoding": "gzip, deflate, br, zstd"})
    assert status == 200 and headers["content-encoding"] == "br", headers
    assert body == (DEFAULT_UI_DIR / (path.lstrip("/") + ".br")).read_bytes()
    assert int(headers["content-length"]) == len(body) < len(original) * 0.35
    assert headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
    assert headers["vary"] == "Accept-Encoding"
    assert headers["cache-control"] == "public, max-age=31536000, immutable"

    headers, body, _ = raw_get(client, path, **{"accept-encoding": "br;q=0, gzip"})
    assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == original, headers

    headers, body, _ = raw_get(client, path, **{"accept-encoding": "identity"})
    assert "content-encoding" not in headers and body == original


def test_a_compressed_answer_is_revalidated_by_its_own_etag(client: TestClient) -> None:
    path = main_script()
    headers, _, _ = raw_get(client, path, **{"accept-encoding": "br"})
    plain, _, _ = raw_get(client, path, **{"accept-encoding": "identity"})
    assert headers["etag"] != plain["etag"]  # one representation's validator is not the other's
    headers_again, body, status = raw_get(client, path, **{"accept-encoding": "br", "if-none-match": headers["etag"]})
    assert status == 304 and body == b"" and headers_again["cache-control"] == "public, max-age=31536000, immutable"


def test_the_page_itself_is_revalidated_on_each_load(client: TestClient) -> None:
    headers, body, status = raw_get(client, "/", **{"accept-encoding": "br, gzip"})
    assert status == 200 and b'<script type="module"' in body, body[:200]
    assert headers["cache-control"] == "no-cache" and headers["vary"] == "Accept-Encoding"


def test_a_file_without_a_compressed_copy_is_sent_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>popagent</title>")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "tiny-abc123.js").write_text("export {};\n")
    with TestClient(create_app(offline_settings(API_KEY, POPAGENT_UI_DIR=str(tmp_path)))) as local:
        headers, body, status = raw_get(local, "/assets/tiny-abc123.js", **{"accept-encoding": "br, gzip"})
    assert status == 200 and body == b"export {};\n" and "content-encoding" not in headers


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip, deflate, br, zstd", {"gzip", "deflate", "br", "zstd"}),
        ("br;q=0, gzip;q=0.5", {"gzip"}),
        ("BR ; q=0.000, GZIP", {"gzip"}),
        ("", set()),
    ],
)
def test_accept_encoding_is_read_with_its_refusals(header: str, accepted: set[str]) -> None:
    assert accepted_encodings(header) == accepted

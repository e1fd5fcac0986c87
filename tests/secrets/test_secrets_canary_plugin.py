"""The canary helpers find every encoded form they claim to, so leak checks can fail."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from support.canary import CANARY, CANARY_PREFIX, assert_no_canary, find_canary


def test_canary_is_recognizable_and_changes_under_url_encoding(canary_secret: str) -> None:
    assert canary_secret == CANARY
    assert canary_secret.startswith(CANARY_PREFIX)
    assert quote(canary_secret, safe="") != canary_secret
    assert quote_plus(canary_secret, safe="") != quote(canary_secret, safe="")


@pytest.mark.parametrize(
    ("encode", "form"),
    [
        (lambda c: c, "raw"),
        (lambda c: json.dumps({"password": c}), "raw"),
        (lambda c: c[len(CANARY_PREFIX) : len(CANARY_PREFIX) + 32], "raw fragment"),  # the random core alone
        (lambda c: base64.b64encode(c.encode()).decode(), "base64"),
        (lambda c: base64.b64encode(c.encode()).decode().rstrip("="), "base64"),
        (lambda c: base64.urlsafe_b64encode(c.encode()).decode(), "base64"),
        (lambda c: base64.b64encode(b"x" + c.encode() + b"tail").decode(), "base64"),
        (lambda c: base64.b64encode(b"xy" + c.encode()).decode(), "base64"),
        (lambda c: base64.urlsafe_b64encode(b"prefix:" + c.encode()).decode(), "base64"),
        (lambda c: c.encode().hex(), "hex"),
        (lambda c: c.encode().hex().upper(), "hex"),
        (lambda c: "token=" + quote(c, safe=""), "url-encoded"),
        (lambda c: quote(c, safe="").lower(), "url-encoded"),
        (lambda c: "q=" + quote_plus(c, safe=""), "url-encoded (plus)"),
    ],
    ids=[
        "raw",
        "json",
        "core",
        "b64",
        "b64-unpadded",
        "b64-urlsafe",
        "b64-offset-1",
        "b64-offset-2",
        "b64-urlsafe-prefixed",
        "hex",
        "hex-upper",
        "url",
        "url-lower",
        "url-plus",
    ],
)
def test_every_form_is_found_inside_larger_text(encode, form: str) -> None:  # type: ignore[no-untyped-def]
    data = "header " + encode(CANARY) + " trailer"
    assert find_canary(data) == form
    assert find_canary(data.encode()) == form
    with pytest.raises(AssertionError) as caught:
        assert_no_canary(data, where="a test string")
    assert CANARY not in str(caught.value)


def test_clean_text_passes() -> None:
    assert_no_canary("popagent-canary- is just the prefix; secret stored; " + "ab" * 100)
    assert find_canary(base64.b64encode(b"popagent-canary-" + b"0" * 40)) is None

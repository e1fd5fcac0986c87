"""Internal caller credentials: servers know digests only, so they can tell callers apart but never impersonate one."""

from __future__ import annotations

import json

import pytest

from popagent_core.auth import CallerRegistry
from popagent_core.credentials import generate_credentials, token_digest
from popagent_core.errors import ConfigurationError, Unauthenticated
from popagent_core.topology import SERVICE_NAMES


def test_generated_credentials_are_distinct_and_the_json_holds_only_digests():
    tokens, callers_json = generate_credentials()
    digests = json.loads(callers_json)

    assert sorted(tokens) == sorted(SERVICE_NAMES) == sorted(digests)
    assert len(set(tokens.values())) == len(SERVICE_NAMES)
    for caller, token in tokens.items():
        assert token.startswith(f"{caller}.")
        assert digests[caller] == token_digest(token)
        assert token not in callers_json


def test_each_token_authenticates_as_its_own_caller_only():
    tokens, callers_json = generate_credentials()
    registry = CallerRegistry.from_json(callers_json)

    assert {caller: registry.authenticate(token) for caller, token in tokens.items()} == {c: c for c in tokens}


@pytest.mark.parametrize(
    "token",
    [None, "", "gateway", "gateway.", "stranger.abc", "browser-bridge.0123456789"],
)
def test_anything_else_is_unauthenticated(token):
    _, callers_json = generate_credentials()

    with pytest.raises(Unauthenticated):
        CallerRegistry.from_json(callers_json).authenticate(token)


def test_a_token_with_another_callers_name_prefix_is_refused():
    tokens, callers_json = generate_credentials()
    registry = CallerRegistry.from_json(callers_json)
    secret_part = tokens["gateway"].split(".", 1)[1]

    # Gateway's secret presented under the secrets service's name.
    with pytest.raises(Unauthenticated):
        registry.authenticate(f"secrets.{secret_part}")


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ("", "is required"),
        ("   ", "is required"),
        ("{not json", "not valid JSON"),
        ("[]", "must map caller names"),
        ('{"gateway": "abc"}', "must map caller names"),
        ('{"gateway": 5}', "must map caller names"),
    ],
)
def test_a_bad_callers_map_is_a_configuration_error_naming_the_variable(raw, complaint):
    with pytest.raises(ConfigurationError, match=complaint) as caught:
        CallerRegistry.from_json(raw)

    assert "POPAGENT_INTERNAL_CALLERS" in caught.value.message

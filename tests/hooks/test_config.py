"""POPAGENT_HOOKS: every refusal names its JSON path; a bad document stops the process with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hooks.helpers import ALLOWED, SPEC_EXAMPLE, config_of, handler

from popagent_core.credentials import generate_credentials
from popagent_core.settings import load_settings
from popagent_hooks.config import DEFAULT_TIMEOUT_MS, HooksConfigError, parse_hooks_config
from popagent_hooks.settings import Settings
from popagent_hooks_client.events import Event
from support.https_receiver import make_secret

URL = "https://hooks.test/popagent"
SECRET = make_secret()
HOSTS = frozenset(ALLOWED.split(","))


def base() -> dict[str, Any]:
    return {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {"id": "tool-policy", "type": "http", "url": URL, "matcher": ["remember"], "secret": SECRET}
            ],
            "PostToolUse": [{"id": "observer", "type": "http", "url": URL, "secret": SECRET}],
        },
    }


def with_handler(**changes: Any) -> dict[str, Any]:
    doc = base()
    entry = doc["hooks"]["PreToolUse"][0]
    for key, value in changes.items():
        if value is ...:
            entry.pop(key)
        else:
            entry[key] = value
    return doc


H = "$.hooks.PreToolUse[0]"

REFUSALS: list[tuple[str, str | dict[str, Any], str]] = [
    ("not json", "{", "$ is not valid JSON"),
    ("not an object", "[]", "$ must be a JSON object"),
    ("NaN", '{"version": 1, "hooks": {}, "x": NaN}', "$ contains NaN"),
    ("unknown root key", {**base(), "extra": 1}, "$.extra is not a known key"),
    ("missing version", {"hooks": {}}, "$.version is required"),
    ("version 2", {**base(), "version": 2}, "$.version must be 1"),
    ("version true", {**base(), "version": True}, "$.version must be 1"),
    ("version string", {**base(), "version": "1"}, "$.version must be 1"),
    ("hooks not an object", {"version": 1, "hooks": []}, "$.hooks must be an object"),
    ("unknown event", {"version": 1, "hooks": {"PreToolCall": []}}, "$.hooks.PreToolCall is not a hook event"),
    ("event not a list", {"version": 1, "hooks": {"Stop": {}}}, "$.hooks.Stop must be a list"),
    ("handler not an object", {"version": 1, "hooks": {"Stop": ["x"]}}, "$.hooks.Stop[0] must be an object"),
    ("unknown handler key", with_handler(headers={"a": "b"}), f"{H}.headers is not a known handler key"),
    ("missing id", with_handler(id=...), f"{H}.id is required"),
    ("missing type", with_handler(type=...), f"{H}.type is required"),
    ("missing url", with_handler(url=...), f"{H}.url is required"),
    ("bad id", with_handler(id="has space"), f"{H}.id must be"),
    ("empty id", with_handler(id=""), f"{H}.id must be"),
    ("type command", with_handler(type="command"), f'{H}.type must be "http"'),
    ("http url", with_handler(url="http://hooks.test/x"), f"{H}.url must use https"),
    ("host not allowed", with_handler(url="https://evil.test/x"), f"{H}.url host 'evil.test' is not listed"),
    ("suffix of an allowed host", with_handler(url="https://hooks.test.evil.test/x"), f"{H}.url host"),
    ("credentials in url", with_handler(url="https://user:pw@hooks.test/x"), f"{H}.url must not carry credentials"),
    ("fragment", with_handler(url="https://hooks.test/x#frag"), f"{H}.url must not have a fragment"),
    ("port out of range", with_handler(url="https://hooks.test:99999/x"), f"{H}.url is not a valid URL"),
    ("url not a string", with_handler(url=5), f"{H}.url must be a non-empty string"),
    ("url with a space", with_handler(url="https://hooks.test/a b"), f"{H}.url must be an ASCII URL"),
    ("no host", with_handler(url="https:///x"), f"{H}.url must name a host"),
    ("empty matcher", with_handler(matcher=[]), f"{H}.matcher must be a non-empty list"),
    ("matcher not a list", with_handler(matcher="remember"), f"{H}.matcher must be a non-empty list"),
    ("hyphenated createTool id", with_handler(matcher=["get-time"]), f"{H}.matcher[0] must be a tool registry key"),
    ("wildcard matcher", with_handler(matcher=["remember", "*"]), f"{H}.matcher[1] must be a tool registry key"),
    (
        "wildcard beyond one MCP server",
        with_handler(matcher=["mcp__.*"]),
        f"{H}.matcher[0] must be a tool registry key",
    ),
    ("pattern other than .*", with_handler(matcher=["mcp__srv__ec.*"]), f"{H}.matcher[0] must be a tool registry key"),
    ("duplicate matcher key", with_handler(matcher=["remember", "remember"]), f"{H}.matcher lists a key twice"),
    ("timeout above 30 s", with_handler(timeoutMs=30_001), f"{H}.timeoutMs must be an integer from 1 to 30000"),
    ("timeout zero", with_handler(timeoutMs=0), f"{H}.timeoutMs must be an integer"),
    ("timeout as string", with_handler(timeoutMs="2000"), f"{H}.timeoutMs must be an integer"),
    ("timeout as float", with_handler(timeoutMs=2000.5), f"{H}.timeoutMs must be an integer"),
    ("timeout as bool", with_handler(timeoutMs=True), f"{H}.timeoutMs must be an integer"),
    ("unknown failure mode", with_handler(failureMode="sometimes"), f'{H}.failureMode must be "open" or "closed"'),
    ("secret without prefix", with_handler(secret=SECRET.removeprefix("whsec_")), f"{H}.secret must be"),
    ("secret too short", with_handler(secret="whsec_" + "QUJD"), f"{H}.secret must be"),
    ("secret not base64", with_handler(secret="whsec_!!!!"), f"{H}.secret must be"),
    (
        "closed observational handler",
        {"version": 1, "hooks": {"PostToolUse": [handler("o", URL, failureMode="closed")]}},
        '$.hooks.PostToolUse[0].failureMode cannot be "closed"',
    ),
    (
        "matcher on an event that takes none",
        {"version": 1, "hooks": {"UserPromptSubmit": [handler("p", URL, matcher=["x"])]}},
        "$.hooks.UserPromptSubmit[0].matcher is not accepted",
    ),
    (
        "duplicate id across events",
        {"version": 1, "hooks": {"PreToolUse": [handler("same", URL)], "Stop": [handler("same", URL)]}},
        "$.hooks.Stop[0].id duplicates the id of $.hooks.PreToolUse[0]",
    ),
    (
        "duplicate JSON key",
        '{"version": 1, "hooks": {"Stop": [{"id": "a", "id": "b", "type": "http", "url": "' + URL + '"}]}}',
        "$.hooks.Stop[0].id appears twice",
    ),
]


@pytest.mark.parametrize(("raw", "message"), [(r, m) for _, r, m in REFUSALS], ids=[n for n, _, _ in REFUSALS])
def test_configuration_refusals_name_the_json_path(raw: str | dict[str, Any], message: str) -> None:
    text = raw if isinstance(raw, str) else json.dumps(raw)
    with pytest.raises(HooksConfigError) as caught:
        parse_hooks_config(text, HOSTS)
    assert str(caught.value).startswith(message), str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_base_document_is_accepted_with_defaults() -> None:
    config = parse_hooks_config(json.dumps(base()), HOSTS)
    (policy,) = config.handlers[Event.PRE_TOOL_USE]
    (observer,) = config.handlers[Event.POST_TOOL_USE]
    assert (policy.timeout_ms, policy.fail_closed, policy.matcher) == (DEFAULT_TIMEOUT_MS, True, {"remember"})
    assert (observer.fail_closed, observer.matcher) == (False, None)


def test_gate_events_may_be_configured_open_and_delegation_events_take_specialist_ids() -> None:
    config = config_of(
        Stop=[handler("stop", URL, failureMode="open", timeoutMs=30_000)],
        SubagentStart=[handler("delegation", URL, matcher=["researcher", "code-reviewer"])],
    )
    assert config.handlers[Event.STOP][0].fail_closed is False
    assert config.handlers[Event.STOP][0].timeout_ms == 30_000
    assert config.handlers[Event.SUBAGENT_START][0].matcher == {"researcher", "code-reviewer"}


def test_matching_is_by_exact_key_in_declaration_order() -> None:
    config = config_of(
        PreToolUse=[
            handler("all", URL),
            handler("remember-only", URL, matcher=["remember"]),
            handler("web", URL, matcher=["webSearch", "getTime"]),
        ]
    )
    assert [h.id for h in config.matching(Event.PRE_TOOL_USE, "remember")] == ["all", "remember-only"]
    assert [h.id for h in config.matching(Event.PRE_TOOL_USE, "getTime")] == ["all", "web"]
    assert [h.id for h in config.matching(Event.PRE_TOOL_USE, "Remember")] == ["all"]
    assert [h.id for h in config.matching(Event.PRE_TOOL_USE, "remember ")] == ["all"]
    assert config.matching(Event.POST_TOOL_USE, "remember") == []


def test_an_mcp_server_matcher_matches_every_tool_of_that_server_only() -> None:
    config = config_of(PreToolUse=[handler("issues", URL, matcher=["mcp__issues__.*", "getTime"])])
    for target in ("mcp__issues__close", "mcp__issues__search_all", "getTime"):
        assert [h.id for h in config.matching(Event.PRE_TOOL_USE, target)] == ["issues"], target
    for target in ("mcp__issues_old__close", "mcp__issue__close", "mcp__other__close", "issues", "mcp__issues"):
        assert config.matching(Event.PRE_TOOL_USE, target) == [], target


def test_the_spec_example_without_a_secret_is_an_unsigned_handler() -> None:
    config = parse_hooks_config(SPEC_EXAMPLE, frozenset({"hooks.example.com"}))
    (policy,) = config.handlers[Event.PRE_TOOL_USE]
    assert (policy.id, policy.url, policy.matcher, policy.timeout_ms, policy.fail_closed) == (
        "tool-policy",
        "https://hooks.example.com/popagent",
        frozenset({"remember", "useBrowserSecret"}),
        2000,
        True,
    )
    assert (policy.secret, policy.signed) == (None, False)
    signed = parse_hooks_config(json.dumps(base()), HOSTS).handlers[Event.PRE_TOOL_USE][0]
    assert signed.signed and signed.secret is not None


def test_digest_changes_with_the_configuration_but_not_with_secrets() -> None:
    one = config_of(Stop=[handler("s", URL, secret=make_secret())])
    same_but_secret = config_of(Stop=[handler("s", URL, secret=make_secret())])
    longer_timeout = config_of(Stop=[handler("s", URL, timeoutMs=3000)])
    assert one.digest == same_but_secret.digest
    assert one.digest != longer_timeout.digest


def _settings_env(**values: str) -> dict[str, str]:
    return {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_INTERNAL_CALLERS": generate_credentials()[1],
        **values,
    }


def test_settings_refuse_a_bad_document_naming_the_variable_and_path(capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.dumps(with_handler(timeoutMs=31_000))
    with pytest.raises(SystemExit) as caught:
        load_settings(Settings, "hooks", **_settings_env(POPAGENT_HOOKS=raw, POPAGENT_HOOK_ALLOWED_HOSTS=ALLOWED))
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "POPAGENT_HOOKS $.hooks.PreToolUse[0].timeoutMs must be an integer from 1 to 30000" in err
    assert SECRET not in err


def test_settings_refuse_wildcard_allowed_hosts() -> None:
    with pytest.raises(ValueError, match=r"POPAGENT_HOOK_ALLOWED_HOSTS|must be an exact hostname"):
        Settings(**_settings_env(POPAGENT_HOOK_ALLOWED_HOSTS="*.example.com"))  # type: ignore[arg-type]


def test_settings_without_hooks_have_no_handlers() -> None:
    settings = Settings(**_settings_env(POPAGENT_HOOKS=""))  # type: ignore[arg-type]
    assert settings.hooks.handlers == {}


def test_hooks_only_come_from_server_configuration() -> None:
    # The Dispatch request has no field that could carry a handler: event data only.
    from popagent.hooks.v1 import hooks_pb2

    fields = set(hooks_pb2.DispatchRequest.DESCRIPTOR.fields_by_name)
    assert fields == {"event", "session_id", "turn_id", "tool_call_id", "model", "target", "detail_json", "event_id"}


def test_process_with_a_bad_document_exits_2_with_one_line_naming_the_path() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
    env.update(
        _settings_env(
            POPAGENT_HOOKS=json.dumps(with_handler(url="https://not-allowed.test/hook")),
            POPAGENT_HOOK_ALLOWED_HOSTS=ALLOWED,
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "popagent_hooks"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "$.hooks.PreToolUse[0].url host 'not-allowed.test' is not listed in POPAGENT_HOOK_ALLOWED_HOSTS" in lines[0]
    assert SECRET not in result.stderr

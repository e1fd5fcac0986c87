"""Credential detection in free text (popagent_core.secret_text): the shapes a user types or a
model repeats are redacted and counted, ordinary prose, paths and ids are left as written."""

from __future__ import annotations

import hashlib
import logging
import secrets
import string
import uuid

import orjson
import pytest

from popagent_core import secret_text
from popagent_core.log import QUIET_LOGGERS, JsonFormatter, configure_logging
from popagent_core.secret_text import REDACTED, carries_secret, find_secrets, redact_secrets, screen
from popagent_core.span_store import Redactor, SpanStoreProcessor, StoredLogHandler

ALPHANUMERIC = string.ascii_letters + string.digits


def random_text(size: int, alphabet: str = ALPHANUMERIC) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(size))


def github_token() -> str:
    return "ghp_" + random_text(36)


@pytest.mark.parametrize(
    ("typed", "secret"),
    [
        ("my password is Tr0ub4dor&3x9", "Tr0ub4dor&3x9"),
        ("My Password is: Tr0ub4dor&3x9.", "Tr0ub4dor&3x9"),
        ("The password for the admin account is Summer2024!", "Summer2024"),
        ("pw: s3cretValue", "s3cretValue"),
        ("password: hunter", "hunter"),
        ("passcode 4471 for the door", "4471"),
        ("the pin is 90210", "90210"),
        ("my api key is abcd-1234-efgh", "abcd-1234-efgh"),
        ('{"password": "correct horse battery staple"}', "correct horse battery staple"),
        ("db_password = 'hunter2'", "hunter2"),
        ("api_key = hunter22 and more", "hunter22"),
        ("connect to postgres://admin:S3cr3tPass@db.example.com:5432/app", "S3cr3tPass"),
        ("AKIAIOSFODNN7EXAMPLE is the access key", "AKIAIOSFODNN7EXAMPLE"),
        ("use sk-proj-abcdefghijklmnop1234567890 for it", "sk-proj-abcdefghijklmnop1234567890"),
        ("signing key whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ok", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ("slack xoxb-123456789012-abcdefghij here", "xoxb-123456789012-abcdefghij"),
        ("Authorization: Bearer abc.def", "abc.def"),
    ],
)
def test_a_typed_credential_is_redacted(typed: str, secret: str) -> None:
    screened = screen(typed)
    assert secret not in screened.text and REDACTED in screened.text
    assert screened.withheld >= 1
    assert carries_secret(typed)


def test_a_fresh_github_token_and_a_spoken_password_are_withheld_and_counted() -> None:
    token = github_token()
    screened = screen(f"My password is Tr0ub4dor&3x9 and the token is {token}, keep them safe.")
    assert screened.text == f"My password is {REDACTED} and the token is {REDACTED}, keep them safe."
    assert screened.withheld == 2


def test_random_keys_are_redacted_by_their_entropy() -> None:
    base64_key = random_text(40, ALPHANUMERIC + "+/")
    hex_key = secrets.token_hex(32)
    text = f"first {base64_key} then {hex_key} end"
    assert redact_secrets(text) == f"first {REDACTED} then {REDACTED} end"


def test_a_pem_private_key_is_redacted_whole() -> None:
    body = "\n".join(random_text(64, ALPHANUMERIC + "+/") for _ in range(3))
    text = f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nthanks"
    assert redact_secrets(text) == f"key:\n{REDACTED}\nthanks"


def test_a_jwt_whose_signature_looks_plain_is_redacted_to_its_end() -> None:
    # A signature with repeats ("ttt", "iii") measures below the entropy limit: the JWT's own shape
    # must carry it (a random signature failed so on a CI run).
    payload = "eyJ" + "".join(hashlib.sha256(bytes([n])).hexdigest()[:10] + "Qx" for n in range(25))
    jwt = f"eyJhbGciOiJIUzI1NiJ9.{payload}.CozC9AJVBowRWhttt1HYiiiWNoFbh1ivwt28TVVtgv5"
    assert redact_secrets(f"token={jwt} done") == f"token={REDACTED} done"


def test_a_long_jwt_is_redacted_to_its_end() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9." + "eyJ" + random_text(300) + "." + random_text(43)
    assert redact_secrets(f"token={jwt} done").endswith(f"{REDACTED} done")
    assert jwt[-20:] not in redact_secrets(f"the jwt {jwt} done")


@pytest.mark.parametrize(
    "benign",
    [
        "The quick brown fox jumps over the lazy dog, then naps.",
        "the token is expired",
        "the password is required",
        "my secret key is abc",
        "pin the note to the top",
        "I passed the exam and forgot my password yesterday.",
        "max_tokens=100, input tokens: 512, token_count: 5",
        "Edit services/agent-runner/src/popagent_agent_runner/turn/observational/observer.py line 40",
        "see /usr/local/lib/python3.11/site-packages/detect_secrets/core/scan.py",
        "https://docs.example.com/guides/getting-started?tab=python#install",
        "fixed in 3f78685, see commit 3f78685a2 on main",
        "session 8e6eb979-cb5c-4412-8cc1-118042e9a19f and turn caebd4c2766645e3b2576f9f2dac6e33",
        "password = os.environ['DB_PASSWORD']",
        'password = "{password}"',
        "token: $GITHUB_TOKEN",
        "description=RELATIVE_PATH_DESCRIPTION and json_schema_extra=NOT_BLANK_SCHEMA",
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "Le mot de passe est dans le coffre, à côté de la clé.",
    ],
)
def test_ordinary_text_is_left_as_written(benign: str) -> None:
    assert find_secrets(benign) == []
    assert screen(benign) == secret_text.Screened(benign, 0)


def test_a_full_git_sha_is_redacted_and_a_short_one_stays() -> None:
    """Decided: a 40-hex SHA has the shape of old GitHub tokens and of `openssl rand -hex 20`
    keys, so it is redacted (fail closed); the 7-12 digits git prints stay."""
    sha = secrets.token_hex(20)
    assert redact_secrets(f"commit {sha} ({sha[:7]})") == f"commit {REDACTED} ({sha[:7]})"


def test_text_whose_lower_case_is_longer_keeps_its_positions() -> None:
    token = github_token()
    assert redact_secrets(f"\u0130stanbul office, token {token} ok") == f"\u0130stanbul office, token {REDACTED} ok"


def test_every_library_format_is_found_inside_long_text_as_on_its_own() -> None:
    """Each detector only looks near a hint; a provider key in the middle of long prose must be
    found all the same, whole."""
    samples = [
        "AKIAIOSFODNN7EXAMPLE",
        github_token(),
        "glpat-" + random_text(20),
        "xoxb-123456789012-" + random_text(12).lower(),
        "sk_live_" + random_text(24),
        "SG." + random_text(22) + "." + random_text(43),
        "AC" + random_text(32, string.ascii_lowercase + string.digits),
        "M" + random_text(23) + "." + random_text(6) + "." + random_text(27),
        "123456789:" + random_text(35),
        "https://user:" + random_text(12) + "@host.example.com",
        'aws_secret_access_key = "' + random_text(40) + '"',
    ]
    prose = "Some ordinary words about the garden and services/agent-runner/src/module.py. " * 20
    for sample in samples:
        alone = [sample[span.start : span.end] for span in find_secrets(sample)]
        assert alone, sample
        text = f"{prose} {sample} {prose}"
        inside = [text[span.start : span.end] for span in find_secrets(text)]
        assert inside == alone, sample


def test_carries_secret_also_refuses_long_random_tokens_redaction_keeps() -> None:
    """The learning gate is stricter than redaction: a UUID-shaped hex token is an id to redaction
    and a possible key to learning."""
    token = uuid.uuid4().hex
    assert find_secrets(f"the form said: {token}") == []
    assert carries_secret(f"the form said: {token}")
    assert not carries_secret("Answers claimed results that no tool had shown.")


def test_a_log_line_quoting_a_credential_is_redacted_on_stderr_and_in_the_store() -> None:
    token = github_token()
    record = logging.LogRecord(
        "popagent_test", logging.WARNING, __file__, 1, "user said %s", ("my password is Tr0ub4dor&3x9",), None
    )
    turn_id = uuid.uuid4().hex
    record.__dict__.update({"detail": f"token {token}", "turn_id": turn_id, "api_key": "x", "secret": "bank-login"})
    line = JsonFormatter("tests").format(record)
    assert "Tr0ub4dor&3x9" not in line and token not in line
    parsed = orjson.loads(line)
    assert parsed["msg"] == f"user said my password is {REDACTED}"
    assert parsed["turn_id"] == turn_id and parsed["secret"] == "bank-login"

    processor = SpanStoreProcessor()
    StoredLogHandler(processor, "tests", Redactor(), info_loggers=()).emit(record)
    [row] = processor.take_logs()
    assert "Tr0ub4dor&3x9" not in str(row) and token not in str(row)
    assert row[4] == f"user said my password is {REDACTED}"
    assert orjson.loads(row[7])["secret"] == REDACTED


def test_third_party_loggers_stay_at_warning() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        configure_logging("tests", "INFO")
        assert "pygls" in QUIET_LOGGERS
        assert not logging.getLogger("pygls.protocol.json_rpc").isEnabledFor(logging.INFO)
        assert logging.getLogger("pygls.protocol.json_rpc").isEnabledFor(logging.WARNING)
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("popagent_agent_runner").isEnabledFor(logging.INFO)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, quiet_level in levels.items():
            logging.getLogger(name).setLevel(quiet_level)


def test_redacted_text_screens_clean() -> None:
    """Screening twice (evidence, then evolution's ingest) counts nothing the second time."""
    once = redact_secrets(f"password: Tr0ub4dor&3x9, api_key = 'hunter22', token {github_token()}.")
    assert screen(once) == secret_text.Screened(once, 0)

"""What the user reads when a turn failed: one table keyed by the failure class.

Each text says what happened and what to do. A library's exception text never reaches the
user: a provider failure carries the provider's own explanation (its error body), and a
failure of popagent's own code says where the details are (the service log).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic_ai.exceptions import ModelHTTPError

from popagent_agent_runner.context.hooks import bounded
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.llm.model import ModelFailure


@dataclass(frozen=True)
class FailureText:
    what: str  # what happened; `{gateway}` is the model gateway's host and port
    todo: str  # what the user can do about it


AGAIN_OR_OTHER_MODEL = "Send the message again; if it keeps failing, pick another model."

FAILURE_TEXTS: dict[TurnFailure, FailureText] = {
    TurnFailure.RATE_LIMIT: FailureText(
        "The model provider is rate limiting requests", "Wait a moment, then send the message again."
    ),
    TurnFailure.QUOTA: FailureText(
        "The model provider's quota is exhausted", "Raise the quota at the provider, or pick another model."
    ),
    TurnFailure.OVERLOADED: FailureText("The model provider is overloaded", AGAIN_OR_OTHER_MODEL),
    TurnFailure.UNAVAILABLE: FailureText("The model provider is unavailable", AGAIN_OR_OTHER_MODEL),
    TurnFailure.SERVER_ERROR: FailureText("The model provider failed", AGAIN_OR_OTHER_MODEL),
    TurnFailure.CONNECTION: FailureText(
        "The model gateway at {gateway} is not reachable", "Check NINEROUTER_URL or start the gateway."
    ),
    TurnFailure.TIMEOUT: FailureText(
        "The model provider did not answer in time", "Send the message again, or pick a faster model."
    ),
    TurnFailure.REQUEST_TIMEOUT: FailureText(
        "The model provider did not answer in time", "Send the message again, or pick a faster model."
    ),
    TurnFailure.AUTHENTICATION: FailureText(
        "The model gateway refused popagent's credentials", "Check NINEROUTER_API_KEY."
    ),
    TurnFailure.NOT_FOUND: FailureText(
        "The model provider does not know this model", "Pick a model the model list offers."
    ),
    TurnFailure.CONTEXT_WINDOW: FailureText(
        "The conversation is too long for this model",
        "Start a new chat, or pick a model with a larger context window.",
    ),
    TurnFailure.REJECTED: FailureText(
        "The model provider rejected the request", "Change the message or its attachments and send it again."
    ),
    TurnFailure.PROVIDER_ERROR: FailureText("The model provider reported an error", AGAIN_OR_OTHER_MODEL),
    TurnFailure.FRAMEWORK: FailureText(
        "The turn failed inside popagent", "Send the message again; the agent-runner log has the details."
    ),
    TurnFailure.SHUTDOWN: FailureText(
        "The service stopped during this turn; what was streamed is kept",
        "Send your message again in a moment.",
    ),
    TurnFailure.STORAGE: FailureText(
        "The answer could not be saved: the database is unavailable",
        "Your message is kept; send it again in a moment.",
    ),
}


# The database stayed down for as long as the prompt's storing retries: nothing of the turn is kept.
PROMPT_NOT_STORED_TEXT = (
    "Your message could not be saved: the database is unavailable. Send it again once popagent is back."
)

# A connection that broke while the answer arrived: the gateway was reachable.
BROKEN_STREAM = FailureText(
    "The connection to the model gateway at {gateway} broke during the answer; what arrived is kept",
    "Send the message again.",
)


def failure_text(failure_class: TurnFailure, *, gateway: str = "", in_stream: bool = False) -> str:
    """The table's text for a failure that has no detail of its own to show."""
    text = BROKEN_STREAM if failure_class is TurnFailure.CONNECTION and in_stream else FAILURE_TEXTS[failure_class]
    return f"{text.what.format(gateway=gateway_address(gateway))}. {text.todo}"


def gateway_address(base_url: str) -> str:
    """`host:port` of the model gateway's base URL (what the user set NINEROUTER_URL to)."""
    parts = urlsplit(base_url)
    if not parts.hostname:
        return base_url or "NINEROUTER_URL"
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname


def provider_message(error: BaseException, failure: ModelFailure) -> str:
    """The provider's own explanation when its error body has one, else the failure's message."""
    body = error.body if isinstance(error, ModelHTTPError) else None
    if isinstance(body, dict):
        nested = body.get("error")
        for candidate in (body.get("message"), nested.get("message") if isinstance(nested, dict) else nested):
            if isinstance(candidate, str) and candidate:
                return candidate
    return failure.message


# Failures whose detail is a library's (a connection error, an exception in our own code): the
# table's text stands alone.
WITHOUT_DETAIL = frozenset({TurnFailure.CONNECTION, TurnFailure.FRAMEWORK, TurnFailure.STORAGE, TurnFailure.SHUTDOWN})


def failure_message(failure: ModelFailure, detail: str, *, gateway: str = "", in_stream: bool = False) -> str:
    """What the user reads when a turn failed: the table's text, with the provider's explanation
    and the status (and when to retry) where the provider gave them."""
    error_class = failure.error_class if failure.error_class in FAILURE_TEXTS else TurnFailure.FRAMEWORK
    if error_class in WITHOUT_DETAIL:
        return failure_text(error_class, gateway=gateway, in_stream=in_stream)
    text = FAILURE_TEXTS[error_class]
    details = [f"HTTP {failure.status_code}"] if failure.status_code else []
    if failure.retry_after is not None:
        details.append(f"retry after {failure.retry_after:g} s")
    suffix = f" ({', '.join(details)})" if details else ""
    return f"{text.what}{suffix}: {bounded(detail, 500)}. {text.todo}"

"""What the user reads when a turn failed at the model provider."""

from __future__ import annotations

from pydantic_ai.exceptions import ModelHTTPError

from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.llm.model import ModelFailure
from popagent_agent_runner.turn.hooks_points import bounded

# Failures that are not the provider's and whose exception text is a library's: what the
# user reads instead (what happened, what to do).
TURN_TEXTS: dict[TurnFailure, str] = {
    TurnFailure.STORAGE: (
        "The answer could not be saved: the database is unavailable. Your message is kept; send it again in a moment."
    ),
}


def provider_message(error: BaseException, failure: ModelFailure) -> str:
    """The provider's own explanation when its error body has one, else the failure's message."""
    body = error.body if isinstance(error, ModelHTTPError) else None
    if isinstance(body, dict):
        nested = body.get("error")
        for candidate in (body.get("message"), nested.get("message") if isinstance(nested, dict) else nested):
            if isinstance(candidate, str) and candidate:
                return candidate
    return failure.message


def failure_message(failure: ModelFailure, detail: str) -> str:
    """What the user reads when the model provider failed."""
    what = {
        TurnFailure.RATE_LIMIT: "The model provider is rate limiting requests",
        TurnFailure.QUOTA: "The model provider's quota is exhausted",
        TurnFailure.OVERLOADED: "The model provider is overloaded",
        TurnFailure.UNAVAILABLE: "The model provider is unavailable",
        TurnFailure.SERVER_ERROR: "The model provider failed",
        TurnFailure.TIMEOUT: "The model provider did not answer in time",
        TurnFailure.REQUEST_TIMEOUT: "The model provider did not answer in time",
        TurnFailure.CONNECTION: "The connection to the model provider broke",
        TurnFailure.AUTHENTICATION: "The model provider refused the credentials",
        TurnFailure.NOT_FOUND: "The model provider does not know this model",
        TurnFailure.CONTEXT_WINDOW: "The conversation is too long for this model",
        TurnFailure.REJECTED: "The model provider rejected the request",
        TurnFailure.PROVIDER_ERROR: "The model provider reported an error",
        TurnFailure.FRAMEWORK: "The turn failed",
    }.get(failure.error_class, "The turn failed")
    details = [f"HTTP {failure.status_code}"] if failure.status_code else []
    if failure.retry_after is not None:
        details.append(f"retry after {failure.retry_after:g} s")
    suffix = f" ({', '.join(details)})" if details else ""
    return f"{what}{suffix}: {bounded(detail, 500)}"

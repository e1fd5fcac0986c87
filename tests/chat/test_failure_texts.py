"""The one table of what a user reads when a turn failed (issue 22): every class a chat turn can
end with has a text that says what happened and what to do, and no library's words get through."""

from __future__ import annotations

import pytest

from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.llm.model import ModelFailure
from popagent_agent_runner.turn.failure_texts import FAILURE_TEXTS, failure_message, failure_text

# Classes whose text is built from what decided them (a hook's reason, a task's request, the
# self-update policy's refusal: a self-update attempt only, never a chat).
WORDED_ELSEWHERE = {
    TurnFailure.HOOK_DENIED,
    TurnFailure.STOP_BLOCKED,
    TurnFailure.INVALID_TASK,
    TurnFailure.DEADLINE,
    TurnFailure.CONTAINMENT,
}


def test_every_failure_class_a_chat_can_end_with_has_a_text_saying_what_to_do() -> None:
    assert set(FAILURE_TEXTS) == set(TurnFailure) - WORDED_ELSEWHERE
    for failure_class, text in FAILURE_TEXTS.items():
        assert text.what and not text.what.endswith("."), failure_class
        assert text.todo.endswith("."), failure_class


def test_an_unreachable_gateway_is_named_with_the_setting_to_check() -> None:
    refused = "[Errno 111] Connection refused"
    failure = ModelFailure(TurnFailure.CONNECTION, None, None, refused)
    message = failure_message(failure, refused, gateway="http://127.0.0.1:18095/v1")
    assert (
        message == "The model gateway at 127.0.0.1:18095 is not reachable. Check NINEROUTER_URL or start the gateway."
    )


@pytest.mark.parametrize("failure_class", [TurnFailure.FRAMEWORK, TurnFailure.STORAGE, TurnFailure.SHUTDOWN])
def test_a_failure_of_popagents_own_making_shows_no_library_text(failure_class: TurnFailure) -> None:
    error = KeyError("thread-cache-entry")
    message = failure_message(ModelFailure(failure_class, None, None, repr(error)), repr(error))
    assert "KeyError" not in message and "thread-cache-entry" not in message
    assert message == failure_text(failure_class)

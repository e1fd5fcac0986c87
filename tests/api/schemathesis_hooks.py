"""Schemathesis hooks of the fuzz test (tests/api/test_schemathesis.py), loaded by the
schemathesis CLI it runs (`SCHEMATHESIS_HOOKS=api.schemathesis_hooks`): one more check on
every response, that the session's canary secret (`support.canary`, handed over in the
environment) never comes back in any form."""

from __future__ import annotations

from typing import Any

import schemathesis

from support.canary import find_canary


@schemathesis.check
def no_canary(ctx: Any, response: Any, case: Any) -> bool | None:
    form = find_canary(response.content)
    if form is not None:
        raise AssertionError(f"canary secret in the response of {case.operation.label} ({form} form)")
    return None

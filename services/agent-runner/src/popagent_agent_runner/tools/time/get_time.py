"""`getTime`: the current date and time, in the user's time zone when the model knows it."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field
from pydantic_ai import ModelRetry, RunContext, Tool

from popagent_agent_runner.context.deps import TurnDeps


async def get_time(
    ctx: RunContext[TurnDeps],
    time_zone: Annotated[str, Field(max_length=64, description="IANA time zone, e.g. Europe/Paris")] = "UTC",
) -> dict[str, Any]:
    """Get the current date and time. Use this whenever the answer depends on today's date or the time of day."""
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ModelRetry(f"unknown time zone {time_zone!r}; use an IANA name such as UTC or Europe/Paris") from None
    now = dt.datetime.now(zone)
    return {"iso": now.isoformat(timespec="seconds"), "timeZone": time_zone, "weekday": now.strftime("%A")}


TOOL: Tool[TurnDeps] = Tool(get_time, name="getTime")

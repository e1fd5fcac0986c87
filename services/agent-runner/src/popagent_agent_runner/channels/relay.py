"""A turn's reply on a platform: the first text posts a message, later text edits it at most once per
`edit_interval_s` (tool activity as a status line under it), and the end edits it to the complete answer
(follow-up messages beyond the platform's limit). The relay reads the turn's log from its first batch,
so a relay taken over by another runner rebuilds the same text and goes on editing the message already
posted (`message_id`); exactly one final message per turn."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.channels.outbound import LIMITS, Poster, render, split_rendered
from popagent_core.errors import PopagentError

logger = logging.getLogger(__name__)

# Telegram's and Discord's pace for edits of one message; Slack's chat.update tier allows more, but
# a reader gains nothing from faster edits.
EDIT_INTERVAL_S = 1.0
ELLIPSIS = " …"

ErrorSink = Callable[[str], Awaitable[None]]
PostedSink = Callable[[str], Awaitable[None]]


class ReplyRelay:
    def __init__(
        self,
        poster: Poster,
        conversation: str,
        thread: str,
        *,
        on_error: ErrorSink,
        edit_interval_s: float = EDIT_INTERVAL_S,
        message_id: str = "",
        on_posted: PostedSink | None = None,
    ) -> None:
        self.poster = poster
        self.conversation = conversation
        self.thread = thread
        self.on_error = on_error
        self.edit_interval_s = edit_interval_s
        self.texts: dict[str, str] = {}
        self.status = ""
        # The streamed message: posted by this relay, or by the runner that relayed the turn before.
        self.message_id = message_id
        self.on_posted = on_posted
        self._tools: dict[str, str] = {}
        self._shown = ""
        self._changed = asyncio.Event()
        self._finished = False
        self._stop = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self.failure = ""

    @property
    def answer(self) -> str:
        return "\n\n".join(text.strip() for text in self.texts.values() if text.strip())

    def read(self, batch: pb.TurnEventBatch) -> None:
        """Take in one batch of the turn's events."""
        for event in batch.events:
            kind = event.WhichOneof("event")
            if kind == "start":
                # A turn run again (taken over) answers from its start.
                self.texts, self.status = {}, ""
            elif kind == "text_delta":
                part = event.text_delta.part_id
                self.texts[part] = self.texts.get(part, "") + event.text_delta.delta
                self.status = ""
            elif kind == "tool_input":
                self._tools[event.tool_input.tool_call_id] = event.tool_input.tool_name
                self.status = f"⏳ {event.tool_input.tool_name}"
            elif kind == "approval_request":
                tool = self._tools.get(event.approval_request.tool_call_id, "a tool")
                self.status = f"✋ waiting for approval of {tool} (the card below)"
            elif kind == "error":
                self.failure = event.error.message or event.error.error_class
            elif kind == "abort":
                self.failure = "stopped"
        self._changed.set()
        if self._pump is None:
            self._pump = asyncio.create_task(self._pumping(), name="channel-reply-edits")

    def _preview(self) -> str:
        limit = LIMITS[self.poster.platform]
        status = ("\n\n" + self.status) if self.status else ""
        text = self.answer or ("…" if not status else "")
        while text and len(render(self.poster.platform, text + ELLIPSIS + status)) > limit:
            text = text[: max(0, len(text) - max(1, len(text) // 10))]
        return render(self.poster.platform, (text + (ELLIPSIS if self.answer else "") + status).strip())

    async def _pumping(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._finished:
            await self._changed.wait()
            self._changed.clear()
            if self._finished:
                return
            started = loop.time()
            preview = self._preview()
            if preview and preview != self._shown:
                try:
                    if self.message_id:
                        await self.poster.edit(self.conversation, self.message_id, preview)
                    else:
                        self.message_id = await self.poster.post(self.conversation, self.thread, preview)
                        if self.on_posted is not None:
                            await self.on_posted(self.message_id)
                    self._shown = preview
                except PopagentError as exc:
                    await self.on_error(f"a streamed edit failed: {exc}")
            # At most one post or edit per interval; the end cuts the wait short.
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, self.edit_interval_s - (loop.time() - started)))
            except TimeoutError:
                pass

    async def finish(self) -> list[str]:
        """The final edit (and follow-ups): the complete answer, or what went wrong. The ids posted."""
        self._finished = True
        self._stop.set()
        self._changed.set()
        if self._pump is not None:
            # A post or edit in flight ends first (never cancelled: a post whose id were lost would
            # leave a second message), so the final edit is the last one.
            await self._pump
        text = self.answer
        if self.failure:
            text = f"{text}\n\n_({self.failure})_" if text else f"_({self.failure})_"
        parts = split_rendered(self.poster.platform, text or "(no answer)")
        posted: list[str] = []
        first, rest = parts[0], parts[1:]
        if self.message_id:
            try:
                await self.poster.edit(self.conversation, self.message_id, first)
                posted.append(self.message_id)
            except PopagentError as exc:
                await self.on_error(f"the final edit failed, the answer is posted anew: {exc}")
                posted.append(await self.poster.post(self.conversation, self.thread, first))
        else:
            posted.append(await self.poster.post(self.conversation, self.thread, first))
        for part in rest:
            posted.append(await self.poster.post(self.conversation, self.thread, part))
        return posted

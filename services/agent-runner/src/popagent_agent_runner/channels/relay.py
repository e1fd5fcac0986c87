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
from popagent_agent_runner.channels.outbound import LIMITS, Poster, PostFailed, render, split_rendered
from popagent_core.errors import PopagentError

logger = logging.getLogger(__name__)

# Telegram's and Discord's pace for edits of one message; Slack's chat.update tier allows more, but
# a reader gains nothing from faster edits.
EDIT_INTERVAL_S = 1.0
ELLIPSIS = " …"
# A sealed message with no text of the reply in it (only a status line while a tool ran).
CONTINUED = "…"
# How platforms refuse the edit of a message too old to edit.
EXPIRED_EDIT_MARKERS = ("cant_update_message", "message can't be edited", "edit_window_closed")

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
        edit_window_s: float = 0.0,
        stop: str = "",
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
        # Edits of a message stop this long after it was posted (0: never); the reply goes on in a fresh one.
        self.edit_window_s = edit_window_s
        # The turn a Stop button under the streaming message cancels (Slack); gone from the final edit.
        self.stop = stop
        # The answer's characters held by messages sealed before the current one.
        self._offset = 0
        # How far into the answer the current message's last post or edit reached.
        self._shown_upto = 0
        # A message taken over from another runner: its age is unknown, so it counts from now.
        self._posted_at = asyncio.get_running_loop().time() if message_id else 0.0
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

    def _fitting(self, extra: str) -> str:
        """The reply's text from `offset` on, cut so that with `extra` it fits one message."""
        limit = LIMITS[self.poster.platform]
        text = self.answer[self._offset :]
        while text and len(render(self.poster.platform, text + extra)) > limit:
            text = text[: max(0, len(text) - max(1, len(text) // 10))]
        return text

    def _preview(self) -> tuple[str, int]:
        """The current message's text while the turn runs, and how far into the answer it reaches."""
        status = ("\n\n" + self.status) if self.status else ""
        text = self._fitting(ELLIPSIS + status)
        shown = (text + (ELLIPSIS if text else "") + status).strip() or "…"
        return render(self.poster.platform, shown), self._offset + len(text)

    def _age(self) -> float:
        return asyncio.get_running_loop().time() - self._posted_at

    async def _seal(self) -> None:
        """The current message edited, for the last time, to the reply's text it holds (cut at a word
        break, no status line), before the platform stops taking edits of it; the rest of the reply goes
        to a fresh message. A message the platform no longer lets edit is left as it was shown."""
        text = self._fitting("")
        end = self._offset + len(text)
        if end < len(self.answer):
            at = max(text.rfind(" "), text.rfind("\n"))
            if at > 0:
                text, end = text[:at], self._offset + at + 1
        try:
            await self.poster.edit(
                self.conversation, self.message_id, render(self.poster.platform, text.strip() or CONTINUED)
            )
            self._offset = end
        except PopagentError as exc:
            await self.on_error(f"a reply message could no longer be edited, the rest follows anew: {exc}")
            self._offset = self._shown_upto
        self.message_id, self._shown = "", ""

    async def _show(self) -> None:
        preview, upto = self._preview()
        if preview == self._shown:
            return
        if not self.message_id and self._offset and upto == self._offset:
            return  # a sealed message is followed by a fresh one only once there is more text
        try:
            if self.message_id:
                try:
                    await self.poster.edit(self.conversation, self.message_id, preview, self.stop)
                except PostFailed as exc:
                    if not _edit_expired(exc):
                        raise
                    await self.on_error(f"a reply message could no longer be edited, the rest follows anew: {exc}")
                    self._offset, self.message_id = self._shown_upto, ""
                    preview, upto = self._preview()
            if not self.message_id:
                self.message_id = await self.poster.post(self.conversation, self.thread, preview, self.stop)
                self._posted_at = asyncio.get_running_loop().time()
                if self.on_posted is not None:
                    await self.on_posted(self.message_id)
            self._shown, self._shown_upto = preview, upto
        except PopagentError as exc:
            await self.on_error(f"a streamed edit failed: {exc}")

    async def _pumping(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._finished:
            seal_in = None
            if self.edit_window_s and self.message_id:
                seal_in = max(0.0, self.edit_window_s - self._age())
            try:
                await asyncio.wait_for(self._changed.wait(), seal_in)
            except TimeoutError:
                # A quiet stretch (a slow tool) as long as the message's edit window: sealed now.
                await self._seal()
                continue
            self._changed.clear()
            if self._finished:
                return
            started = loop.time()
            await self._show()
            # At most one post or edit per interval; the end cuts the wait short.
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, self.edit_interval_s - (loop.time() - started)))
            except TimeoutError:
                pass

    async def finish(self) -> list[str]:
        """The final edit (and follow-ups): the rest of the answer, or what went wrong. The ids posted."""
        self._finished = True
        self._stop.set()
        self._changed.set()
        if self._pump is not None:
            # A post or edit in flight ends first (never cancelled: a post whose id were lost would
            # leave a second message), so the final edit is the last one.
            await self._pump
        if self.message_id and self.edit_window_s and self._age() >= self.edit_window_s:
            await self._seal()
        text = self.answer[self._offset :].strip()
        if self.failure:
            text = f"{text}\n\n_({self.failure})_" if text else f"_({self.failure})_"
        parts = split_rendered(self.poster.platform, text or ("(no answer)" if not self._offset else CONTINUED))
        posted: list[str] = []
        first, rest = parts[0], parts[1:]
        if self.message_id:
            try:
                await self.poster.edit(self.conversation, self.message_id, first)
                posted.append(self.message_id)
            except PopagentError as exc:
                await self.on_error(f"the final edit failed, the rest of the answer is posted anew: {exc}")
                # What the reader saw of it stays; what follows it is posted once.
                tail = (self.answer[self._shown_upto :].strip() if _edit_expired(exc) else text) or CONTINUED
                parts = split_rendered(self.poster.platform, tail)
                first, rest = parts[0], parts[1:]
                posted.append(await self.poster.post(self.conversation, self.thread, first))
        else:
            posted.append(await self.poster.post(self.conversation, self.thread, first))
        for part in rest:
            posted.append(await self.poster.post(self.conversation, self.thread, part))
        return posted


def _edit_expired(exc: PopagentError) -> bool:
    """The platform refused an edit because the message is too old to edit (Slack's
    `cant_update_message`, Telegram's "message can't be edited")."""
    return any(marker in str(exc) for marker in EXPIRED_EDIT_MARKERS)

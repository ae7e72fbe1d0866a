"""A blocking DevTools client over Chromium's pipe, for the browser box's driver.

Belongs here: the pipe protocol (`--remote-debugging-pipe`: NUL-separated JSON on fds 3 and
4), calls and their answers, and the two ways a browse ends early (`Deadline`, `PageGone`).
Does not belong here: what a browse does with the events (`browser_page`), starting
Chromium or reporting (`browser`).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import json
import os
import select
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Deadline(Exception):
    """The job's time ran out."""


class PageGone(Exception):
    """The page's renderer died (its memory limit, most often) or Chromium exited."""


class Cdp:
    """A blocking DevTools client over Chromium's pipe; events go to `on_event` as they come,
    also while a call waits for its answer (a paused request must be let go meanwhile)."""

    def __init__(self, to_chrome: int, from_chrome: int, deadline: float) -> None:
        self._out = to_chrome
        self._in = from_chrome
        self._buffer = b""
        self._next = 0
        self.deadline = deadline
        self.answers: dict[int, dict[str, Any]] = {}
        self.on_event: Any = None
        self.closed = False

    def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> int:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._out, data) :]
        return self._next

    def call(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        wanted = self.send(method, params, session)
        self.pump(lambda: wanted in self.answers)
        answer = self.answers.pop(wanted)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def pump(self, done: Any, until: float | None = None) -> bool:
        """Handle messages until `done()` or `until` (False then); the job's deadline raises."""
        while not done():
            now = time.monotonic()
            if now >= self.deadline:
                raise Deadline
            if until is not None and now >= until:
                return False
            limit = min(self.deadline, until or self.deadline) - now
            if select.select([self._in], [], [], limit)[0]:
                self._read()
        return True

    @property
    def source(self) -> int:
        """The pipe Chromium writes to."""
        return self._in

    def drain(self) -> None:
        """Handle what Chromium sent, with no deadline: between the steps of a kept browser.
        Chromium gone marks the pipe `closed`."""
        try:
            if select.select([self._in], [], [], 0)[0]:
                self._read()
        except PageGone:
            self.closed = True

    def _read(self) -> None:
        chunk = os.read(self._in, 1 << 20)
        if not chunk:
            raise PageGone("Chromium exited")
        self._buffer += chunk
        *messages, self._buffer = self._buffer.split(b"\0")
        for raw in messages:
            message = json.loads(raw)
            if "id" in message:
                self.answers[message["id"]] = message
            elif self.on_event is not None:
                self.on_event(message)

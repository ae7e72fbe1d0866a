"""Fleet notices: small typed announcements that the records changed, and the seam they
travel through (`Notices`: publish, subscribe, re-read on (re)connect).

A notice says *that* something changed, by id, so every server of a fleet can take the
local effect at once (cut a revoked grant's tunnels, kill an ended session's containers,
release a request waiting on an approval). It never carries authority: the records stay the
truth (a subscriber reads the record before it acts on what a notice names), every effect
is idempotent, and a server that may have missed notices (its listener
reconnected) re-reads what changed through its resync hooks. A payload holds ids and a
status only, never a secret, a token or a value (it travels in clear through PostgreSQL).

Two implementations: `Notices` itself, in-process (one server on SQLite: a notice reaches
this process's subscribers before `publish` returns), and `pg_notices.PostgresNotices`
(LISTEN/NOTIFY on one channel; psycopg is imported only there). Which effect a notice has
is for the rooms that own it, which subscribe; nothing here decides one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Annotated, Literal

import anyio
import anyio.abc
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

log = logging.getLogger(__name__)

MAX_IDS = 40
"""Grant ids in one notice: a NOTIFY payload holds at most 8000 bytes and a grant id is
about 100 characters, so a larger revocation travels as several notices."""
MAX_PAYLOAD = 7900


class _Notice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    origin: str = Field(default="", max_length=200)
    """The server instance that published it (its own copy arrives back over PostgreSQL
    and is skipped: its subscribers had it at once)."""


class GrantRevoked(_Notice):
    """These grants of `tenant` are revoked in the records: cut what they allow."""

    kind: Literal["grant_revoked"] = "grant_revoked"
    tenant: str = Field(max_length=200)
    grant_ids: tuple[str, ...] = Field(min_length=1, max_length=MAX_IDS)


class SessionEnded(_Notice):
    """This session ended in the records: its runs, tokens, grants and containers go."""

    kind: Literal["session_ended"] = "session_ended"
    tenant: str = Field(max_length=200)
    session_id: str = Field(max_length=200)


class ApprovalDecided(_Notice):
    """An approval left `pending` (approved, denied or expired): whoever waits on it, look."""

    kind: Literal["approval_decided"] = "approval_decided"
    approval_id: str = Field(max_length=200)
    tenant: str = Field(max_length=200)
    session_id: str = Field(max_length=200)
    status: Literal["approved", "denied", "expired"]


class TaskCancelRequested(_Notice):
    """A caller asked to cancel this MCP task (`server/tasks`): the server running its
    call, stop it."""

    kind: Literal["task_cancel_requested"] = "task_cancel_requested"
    task_id: str = Field(max_length=200)
    tenant: str = Field(max_length=200)


AnyNotice = GrantRevoked | SessionEnded | ApprovalDecided | TaskCancelRequested
Notice = Annotated[AnyNotice, Field(discriminator="kind")]
Kind = Literal["grant_revoked", "session_ended", "approval_decided", "task_cancel_requested"]
_NOTICE: TypeAdapter[AnyNotice] = TypeAdapter(Notice)

Handler = Callable[[AnyNotice], Awaitable[None]]
Resync = Callable[[], Awaitable[None]]


def revocations(tenant: str, grant_ids: Sequence[str]) -> Iterator[GrantRevoked]:
    """`grant_ids` as notices of at most `MAX_IDS` ids each."""
    for start in range(0, len(grant_ids), MAX_IDS):
        yield GrantRevoked(tenant=tenant, grant_ids=tuple(grant_ids[start : start + MAX_IDS]))


def encode(notice: AnyNotice) -> str:
    payload = notice.model_dump_json()
    if len(payload.encode()) > MAX_PAYLOAD:
        raise ValueError(f"a {notice.kind} notice of {len(payload)} bytes is too large to send")
    return payload


def decode(payload: str) -> AnyNotice | None:
    """The notice in `payload`, or None when it is not one of ours: anyone who may connect
    to the database may NOTIFY on the channel (the caller says so, `Sampled`)."""
    if len(payload) > MAX_PAYLOAD:
        return None  # none of ours is larger: not worth parsing
    try:
        return _NOTICE.validate_json(payload, strict=False)
    except ValidationError:
        return None


class Sampled:
    """One warning about a kind of event, said at most once every `every_s` seconds: a
    flood of them (anyone who may connect may NOTIFY 100 000 junk payloads) writes one line
    now and then with how many more came, not one line each. `flush` says the count held
    back since the last line (call it now and then, so a flood's tail is said too)."""

    def __init__(
        self, message: str, *, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._message = message
        self._every_s = every_s
        self._clock = clock
        self._next = 0.0
        self.held = 0
        """How many since the last line, unsaid."""
        self.total = 0

    def warn(self) -> None:
        self.total += 1
        if self._clock() < self._next:
            self.held += 1
            return
        if self.held:
            log.warning("%s (%d more suppressed before it)", self._message, self.held)
        else:
            log.warning("%s", self._message)
        self._restart()

    def flush(self) -> None:
        if self.held:
            log.warning("%s: %d more suppressed", self._message, self.held)
            self._restart()

    def _restart(self) -> None:
        self.held = 0
        self._next = self._clock() + self._every_s


class Backlog:
    """The notices heard from the fleet that wait for their subscribers: at most `limit`,
    each once (a duplicate of one still waiting is dropped: every effect is idempotent).
    `put` says False when it is full and the notice is dropped: its effect is then left
    to a re-read of the records (`Notices.on_resync`), so a flood is a delay, never
    unbounded memory nor a lost effect."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: dict[AnyNotice, None] = {}
        self._wake = anyio.Event()
        self.coalesced = 0
        self.dropped = 0
        self.most = 0
        """The most that ever waited at once."""

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, notice: AnyNotice) -> bool:
        if notice in self._waiting:
            self.coalesced += 1
            return True
        if len(self._waiting) >= self.limit:
            self.dropped += 1
            return False
        self._waiting[notice] = None
        self.most = max(self.most, len(self._waiting))
        self._wake.set()
        return True

    async def get(self) -> AnyNotice:
        """The oldest notice waiting, once one is."""
        while not self._waiting:
            if self._wake.is_set():
                self._wake = anyio.Event()  # every taker waits on the same one
            await self._wake.wait()
        notice = next(iter(self._waiting))
        del self._waiting[notice]
        return notice


class Notices:
    """The notices of one server process: in-process only (one server on SQLite).

    `publish` hands a notice to this process's subscribers before it returns, one after
    the other; a failing subscriber is logged and the others still get it. Subclasses also
    send it to the rest of the fleet (`_send`) and run a listener in `serve`."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._handlers: list[tuple[frozenset[str], Handler]] = []
        self._resyncs: list[Resync] = []

    def subscribe(self, handler: Handler, *kinds: Kind) -> Callable[[], None]:
        """Call `handler` with every notice of `kinds` (all kinds when none are named)
        until the returned function is called."""
        entry = (frozenset[str](kinds), handler)
        self._handlers.append(entry)
        return lambda: self._handlers.remove(entry)

    def on_resync(self, hook: Resync) -> None:
        """Call `hook` whenever notices may have been missed (a listener that connected or
        reconnected): it re-reads from the records what its subscriber would have changed."""
        self._resyncs.append(hook)

    async def publish(self, notice: AnyNotice) -> None:
        """Deliver `notice` to this process at once and to the fleet (the records it
        announces must already be committed: a peer may re-read them as soon as it hears)."""
        notice = notice.model_copy(update={"origin": self.origin})
        await self._deliver(notice)
        await self._send(notice)

    async def receive(self, notice: AnyNotice) -> None:
        """Hand a notice another server published to this process's subscribers."""
        await self._deliver(notice)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Background work until cancelled (none in-process: nothing comes from elsewhere)."""
        task_status.started()
        await anyio.sleep_forever()

    async def _send(self, notice: AnyNotice) -> None:
        """Send to the other servers of the fleet; in-process there are none."""

    async def _deliver(self, notice: AnyNotice) -> None:
        for kinds, handler in list(self._handlers):
            if kinds and notice.kind not in kinds:
                continue
            try:
                await handler(notice)
            except Exception as exc:
                # Only the type: a message may quote a record.
                log.error("a %s notice's subscriber failed: %s", notice.kind, type(exc).__name__)

    async def _resync(self) -> None:
        for hook in list(self._resyncs):
            try:
                await hook()
            except Exception as exc:
                log.error("re-reading the records after a reconnect failed: %s", type(exc).__name__)

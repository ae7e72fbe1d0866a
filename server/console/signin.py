"""Who is signed in to the console: its signed, expiring cookie, the CSRF token of each
sign-in, and the limit on failed sign-ins.

A sign-in is the operator token typed into the form (checked by `bearer.RouteAuth`, the
one check of it; a tenant's key or JWT is not the operator token, so it never opens the
console). It makes a console session: a random id this server keeps in memory with its
expiry, carried by the cookie `<kind>.<id>.<expires>.<mac>`, the MAC an HMAC-SHA256 under a
key made at random for this process. A cookie counts only with its MAC right, its expiry
ahead and, for a sign-in, its session not signed out: so an expired or tampered cookie, or
one kept after signing out, opens nothing. The CSRF token of a session is the HMAC of its
id (stateless and per session, never in the cookie), carried by every form as the hidden
field `csrf`. The sign-in form is held to the same rule with a short-lived `form` ticket,
so no page elsewhere can post a sign-in either.

Sessions live in this process: a restart signs everyone out, and each replica of a fleet
has its own. The clock is an argument, so expiry tests move it instead of sleeping.
Not here: pages and headers (`app.py`), and what a form does once it passed (`actions.py`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

COOKIE = "airlock_console"
FORM_TICKET_S = 600
"""How long a sign-in form stays good to post: past it, the page is loaded again."""
MAX_SESSIONS = 1000
"""Signed-in sessions kept at once; the oldest is dropped past it (each took the token)."""
MAX_FAILURES = 5
FAILURE_WINDOW_S = 60
"""A client address that failed `MAX_FAILURES` sign-ins within this many seconds waits until
the oldest of them is that old before it may try again."""
MAX_CLIENTS = 10_000
"""Client addresses whose failures are remembered at once (the oldest forgotten first)."""

Kind = Literal["session", "form"]
_KINDS: dict[str, Kind] = {"s": "session", "f": "form"}


@dataclass(frozen=True)
class Ticket:
    """What a valid cookie says: a signed-in session, or a sign-in form to be posted."""

    kind: Kind
    id: str
    expires_at: int


@dataclass
class _Session:
    expires_at: int
    notices: list[str] = field(default_factory=list)


class ConsoleSessions:
    """The console sessions of this server, and the cookies and CSRF tokens that name them."""

    def __init__(self, lifetime_s: int, clock: Callable[[], float]) -> None:
        self._lifetime_s = lifetime_s
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._live: dict[str, _Session] = {}

    @property
    def lifetime_s(self) -> int:
        return self._lifetime_s

    def sign_in(self) -> Ticket:
        """A new signed-in session, valid for `lifetime_s` from now."""
        now = self._clock()
        for expired in [k for k, s in self._live.items() if s.expires_at <= now]:
            del self._live[expired]
        while len(self._live) >= MAX_SESSIONS:
            del self._live[next(iter(self._live))]
        ticket = Ticket("session", secrets.token_urlsafe(32), int(now) + self._lifetime_s)
        self._live[ticket.id] = _Session(ticket.expires_at)
        return ticket

    def form_ticket(self) -> Ticket:
        """A ticket for one sign-in form (kept nowhere: its MAC is its proof)."""
        return Ticket("form", secrets.token_urlsafe(16), int(self._clock()) + FORM_TICKET_S)

    def sign_out(self, ticket: Ticket) -> None:
        self._live.pop(ticket.id, None)

    def cookie(self, ticket: Ticket) -> str:
        body = f"{ticket.kind[0]}.{ticket.id}.{ticket.expires_at}"
        return f"{body}.{self._mac('cookie', body)}"

    def read(self, value: str | None, kind: Kind) -> Ticket | None:
        """The ticket of cookie `value` if it is one of `kind`, signed here, unexpired and,
        for a session, not signed out; None otherwise."""
        if not value or len(value) > 200:
            return None
        body, _, mac = value.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or _KINDS.get(parts[0]) != kind or not parts[2].isdigit():
            return None
        if not hmac.compare_digest(mac.encode(), self._mac("cookie", body).encode()):
            return None
        ticket = Ticket(kind, parts[1], int(parts[2]))
        if ticket.expires_at <= self._clock():
            return None
        if kind == "session" and ticket.id not in self._live:
            return None
        return ticket

    def csrf(self, ticket: Ticket) -> str:
        """The CSRF token every form of this ticket carries (hidden field `csrf`)."""
        return self._mac("csrf", f"{ticket.kind}.{ticket.id}")

    def csrf_ok(self, ticket: Ticket, submitted: str | None) -> bool:
        return submitted is not None and hmac.compare_digest(
            submitted.encode("utf-8", "surrogatepass"), self.csrf(ticket).encode()
        )

    def say(self, ticket: Ticket, notice: str) -> None:
        """Keep `notice` to show on the session's next page (after a form's redirect)."""
        session = self._live.get(ticket.id)
        if session is not None:
            session.notices = [*session.notices[-4:], notice]

    def notices(self, ticket: Ticket) -> list[str]:
        """The notices kept for the session, taken: each is shown once."""
        session = self._live.get(ticket.id)
        if session is None:
            return []
        taken, session.notices = session.notices, []
        return taken

    def _mac(self, purpose: str, text: str) -> str:
        digest = hmac.new(self._key, f"{purpose}:{text}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class SignInLimiter:
    """Failed sign-ins per client address: `MAX_FAILURES` within `FAILURE_WINDOW_S`, then
    that address waits (a correct token included) until the oldest failure is that old."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds `client` must wait before its next try, or None when it may try now."""
        failures = self._recent(client)
        if len(failures) < MAX_FAILURES:
            return None
        return max(1, int(failures[0] + FAILURE_WINDOW_S - self._clock()) + 1)

    def failed(self, client: str) -> int:
        """Count one more failure of `client`; how many it has in the window now."""
        failures = self._recent(client)
        failures.append(self._clock())
        self._failures[client] = failures
        while len(self._failures) > MAX_CLIENTS:
            del self._failures[next(iter(self._failures))]
        return len(failures)

    def _recent(self, client: str) -> deque[float]:
        failures = self._failures.pop(client, deque())
        while failures and failures[0] <= self._clock() - FAILURE_WINDOW_S:
            failures.popleft()
        if failures:
            # Re-inserted, so the dict stays ordered by last use and the oldest goes first.
            self._failures[client] = failures
        return failures

"""Run tokens: the opaque credential a sandbox presents to its egress proxy.

Minting, verifying and revoking only; what a token lets a request do is decided by the
enforcement point from the claims and the live grants. Every call takes the clock (`now`,
UNIX seconds) as an argument.

A token is 256 random bits (`secrets.token_urlsafe(32)`) handed out once, wrapped in a
`Secret`. This process keeps only its SHA-256, so nothing stored here can be replayed.
A kept browser's steps share one value (`mint(again=...)`): its Chromium caches the
proxy credentials it answered the first challenge with and presents them first on each later
step, so a new value would meet a 407 every step. Each step still binds that value afresh to
its own run and grants, and the step's end forgets it as any run's end does: between steps
the value is valid for nothing.

Tokens live only in this process's memory: a restarted or crashed server knows none of the
tokens it issued, so no token outlives the process that could revoke it. That is the
crash-safety guarantee, and why nothing here is persisted.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from .secret import Secret

# token_urlsafe(32) is 43 characters; anything far longer is not ours and is not hashed.
_MAX_TOKEN_CHARS = 256


@dataclass(frozen=True)
class RunClaims:
    """What a valid run token stands for: one run of one session, its grants, its expiry."""

    tenant: str
    session_id: str
    run_id: str
    grant_ids: tuple[str, ...]
    expires_at: float


def _digest(token: str) -> bytes | None:
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN_CHARS:
        return None
    try:
        return hashlib.sha256(token.encode("utf-8")).digest()
    except UnicodeEncodeError:
        return None


class RunTokens:
    """The run tokens of this process, held as SHA-256 digests only. Thread-safe."""

    def __init__(self) -> None:
        self._claims: dict[bytes, RunClaims] = {}
        self._lock = threading.Lock()

    def mint(
        self,
        *,
        tenant: str,
        session_id: str,
        run_id: str,
        grant_ids: Sequence[str],
        expires_at: float,
        now: float,
        again: Secret | None = None,
    ) -> Secret:
        """A new token for `run_id`, valid until `expires_at` (exclusive).

        The caller passes the earlier of the run deadline and the expiries of the run's
        grants. ValueError if that is not after `now` or an identity is empty.
        `again`: the value an earlier run of the same box was given (a kept browser's
        previous step), bound now to this run alone; ValueError while it is still bound to
        another run, so one value never stands for two runs at once.
        """
        for what, value in (("tenant", tenant), ("session_id", session_id), ("run_id", run_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{what} must be a non-empty string")
        if isinstance(grant_ids, str):
            raise ValueError("grant_ids must be a sequence of grant ids, not one string")
        if expires_at <= now:
            raise ValueError(f"a run token must expire after now ({expires_at} <= {now})")
        claims = RunClaims(
            tenant=tenant,
            session_id=session_id,
            run_id=run_id,
            grant_ids=tuple(grant_ids),
            expires_at=expires_at,
        )
        token = secrets.token_urlsafe(32) if again is None else again.reveal()
        digest = _digest(token)
        if digest is None:
            raise ValueError("a run token's value must be a short non-empty string")
        with self._lock:
            if digest in self._claims:
                raise ValueError("this token value is still bound to another run")
            self._claims[digest] = claims
        return Secret(token) if again is None else again

    def verify(self, token: str, *, run_id: str, now: float) -> RunClaims | None:
        """The claims of `token` if it is known, unexpired, unrevoked and bound to `run_id`.

        Every failure is the same None, so the answer says nothing about why. The lookup is
        by digest, so no comparison ever runs on the token itself.
        """
        digest = _digest(token)
        if digest is None:
            return None
        claims = self._claims.get(digest)
        if claims is None or claims.run_id != run_id or now >= claims.expires_at:
            return None
        return claims

    def revoke_run(self, run_id: str) -> None:
        """Forget every token of `run_id` (the run's `finally`)."""
        with self._lock:
            for digest in [d for d, c in self._claims.items() if c.run_id == run_id]:
                del self._claims[digest]

    def revoke_session(self, tenant: str, session_id: str) -> int:
        """Forget every token of one session; how many there were."""
        with self._lock:
            doomed = [
                d
                for d, c in self._claims.items()
                if c.tenant == tenant and c.session_id == session_id
            ]
            for digest in doomed:
                del self._claims[digest]
        return len(doomed)

    def forget_expired(self, now: float) -> int:
        """Drop tokens expired at `now` (for a periodic sweeper); how many."""
        with self._lock:
            doomed = [d for d, c in self._claims.items() if now >= c.expires_at]
            for digest in doomed:
                del self._claims[digest]
        return len(doomed)

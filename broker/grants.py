"""Capability grants: leases with hierarchical ids, expiry, revocation and quotas.

Holds the in-process state the enforcement point (the egress proxy) consults on every
request; nothing here reads policy files, asks a human or touches the network. The caller
has already checked the request against the policy and passes the capability as the policy
states it with the scope it resolved from the request (`policies.Scope`). Every call takes
the clock (`now`, UNIX seconds) as an argument.

A grant id is `tenant/<tenant>/session/<session>/cap/<26 base32 characters>` (128 random
bits), so ending a session is one `revoke_prefix`. Ids are unguessable, and an id of another
tenant (or, for `get`, another session) gets exactly the answer an unknown id gets: None.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from airlock.errors import InvalidRequest, QuotaExceeded
from airlock.ids import new_id
from airlock.policies import Capability, Scope

Tls = Literal["terminate", "passthrough"]
ApprovedBy = Literal["policy", "user", "operator"]
_APPROVERS = ("policy", "user", "operator")


def _check_id_part(what: str, value: str) -> None:
    # A `/` would let one tenant's or session's name spell another's prefix.
    if not isinstance(value, str) or not value or "/" in value or not value.isprintable():
        raise ValueError(f"{what} must be a non-empty printable string without '/': {value!r}")


def grant_prefix(tenant: str, session_id: str | None = None) -> str:
    """The id prefix of every grant of a tenant, or of one session of it, for `revoke_prefix`."""
    _check_id_part("tenant", tenant)
    if session_id is None:
        return f"tenant/{tenant}/"
    _check_id_part("session_id", session_id)
    return f"tenant/{tenant}/session/{session_id}/"


def _new_grant_id(tenant: str, session_id: str) -> str:
    return new_id(f"{grant_prefix(tenant, session_id)}cap/")


@dataclass(frozen=True)
class Grant:
    """One granted capability of one session, alive from `created_at` until `expires_at`
    (exclusive) unless `revoked_at` comes first.

    `secret` is the vault name of the secret to inject (never a value), with the header and
    format (`"Bearer {secret}"`) to inject it as; a `passthrough` grant never carries one.
    `allow_private` names the private address ranges the policy opened for this capability.
    """

    id: str
    tenant: str
    session_id: str
    capability: str
    params: dict[str, str] = field(hash=False)
    scope: Scope
    secret: str | None
    inject_header: str | None
    inject_format: str | None
    tls: Tls
    allow_private: tuple[str, ...]
    approved_by: ApprovedBy
    reason: str
    created_at: float
    expires_at: float
    revoked_at: float | None = None

    def live(self, now: float) -> bool:
        """True while neither revoked nor expired; a grant is dead at exactly `expires_at`."""
        return self.revoked_at is None and now < self.expires_at


class Grants:
    """The live capability grants of this process, with quotas on how many may be live.

    The store holds no quota of its own: every `grant` names the quotas of the tenant's
    policy (chosen by `tools.Services.policy_for`, their one owner), so no caller can fall
    back to another policy's by leaving them out. Thread-safe. Ended (expired or revoked)
    grants stay visible to `all()` for audit until `forget_ended` drops them.
    """

    def __init__(self) -> None:
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()

    def grant(
        self,
        capability: Capability,
        scope: Scope,
        *,
        name: str,
        params: dict[str, str],
        tenant: str,
        session_id: str,
        approved_by: ApprovedBy,
        reason: str,
        ttl_s: int,
        now: float,
        max_per_session: int,
        max_live_per_tenant: int,
    ) -> Grant:
        """Record a new grant of `capability` (called `name` in the policy) reaching `scope`
        (resolved from it with `params`), live for `ttl_s` seconds from `now`.

        The secret, how it is injected, the TLS mode and the private ranges come from
        `capability`, which the policy model has already checked for consistency.
        `max_per_session` and `max_live_per_tenant` are the quotas of the tenant's own
        policy (each at least 1).
        Raises QuotaExceeded (`quota` = "max_per_session" or "max_live_per_tenant") when
        the session or the tenant already holds as many live grants as allowed, and
        InvalidRequest for a ttl below one second.
        """
        _check_id_part("tenant", tenant)
        _check_id_part("session_id", session_id)
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise InvalidRequest(f"ttl_s must be a whole number of seconds, at least 1: {ttl_s!r}")
        if approved_by not in _APPROVERS:
            raise ValueError(f"approved_by must be one of {_APPROVERS}, not {approved_by!r}")
        if max_per_session < 1 or max_live_per_tenant < 1:
            raise ValueError("grant quotas must be at least 1")
        with self._lock:
            in_session = in_tenant = 0
            for g in self._grants.values():
                if g.tenant == tenant and g.live(now):
                    in_tenant += 1
                    in_session += g.session_id == session_id
            if in_session >= max_per_session:
                raise QuotaExceeded(
                    "max_per_session",
                    max_per_session,
                    f"this session already holds {in_session} live capabilities, the most "
                    f"allowed (max_per_session = {max_per_session}); revoke one with "
                    "revoke_capability or wait until one expires",
                )
            if in_tenant >= max_live_per_tenant:
                raise QuotaExceeded(
                    "max_live_per_tenant",
                    max_live_per_tenant,
                    f"this tenant already holds {in_tenant} live capabilities across its "
                    f"sessions, the most allowed (max_live_per_tenant = "
                    f"{max_live_per_tenant}); revoke some or end idle sessions",
                )
            grant_id = _new_grant_id(tenant, session_id)
            while grant_id in self._grants:  # 128 random bits: never in practice
                grant_id = _new_grant_id(tenant, session_id)
            new = _made(
                capability,
                scope,
                grant_id=grant_id,
                name=name,
                params=params,
                tenant=tenant,
                session_id=session_id,
                approved_by=approved_by,
                reason=reason,
                created_at=now,
                expires_at=now + ttl_s,
            )
            self._grants[grant_id] = new
        return new

    def adopt(
        self,
        capability: Capability,
        scope: Scope,
        *,
        grant_id: str,
        name: str,
        params: dict[str, str],
        tenant: str,
        session_id: str,
        approved_by: ApprovedBy,
        reason: str,
        created_at: float,
        expires_at: float,
    ) -> Grant:
        """Hold here a grant another server of the fleet made (as its record tells), so
        this server's runs and revocations reach it; the one already held if it is. No
        quota is counted: the server that granted it counted it."""
        _check_id_part("tenant", tenant)
        _check_id_part("session_id", session_id)
        if not grant_id.startswith(grant_prefix(tenant, session_id)):
            raise ValueError(f"grant {grant_id!r} is not of session {session_id!r}")
        with self._lock:
            held = self._grants.get(grant_id)
            if held is None:
                held = self._grants[grant_id] = _made(
                    capability,
                    scope,
                    grant_id=grant_id,
                    name=name,
                    params=params,
                    tenant=tenant,
                    session_id=session_id,
                    approved_by=approved_by,
                    reason=reason,
                    created_at=created_at,
                    expires_at=expires_at,
                )
            return held

    def get(self, grant_id: str, *, tenant: str, session_id: str, now: float) -> Grant | None:
        """The grant if it is live and belongs to this tenant and session; None otherwise.

        Unknown, foreign, expired and revoked ids all give the same None.
        """
        g = self._grants.get(grant_id)
        if g is None or g.tenant != tenant or g.session_id != session_id or not g.live(now):
            return None
        return g

    def revoke(
        self, grant_id: str, *, tenant: str, now: float, session_id: str | None = None
    ) -> Grant | None:
        """End a grant of `tenant` (of `session_id` only, when given) at `now`.

        Ownership is checked before anything changes: a grant of another tenant or session
        is left alone and gives None, like an unknown id. Returns the grant as it now
        stands: with `revoked_at == now` if it was live, unchanged if it had already ended.
        """
        with self._lock:
            g = self._grants.get(grant_id)
            if g is None or g.tenant != tenant:
                return None
            if session_id is not None and g.session_id != session_id:
                return None
            if g.live(now):
                g = dataclasses.replace(g, revoked_at=now)
                self._grants[grant_id] = g
            return g

    def revoke_prefix(self, prefix: str, *, now: float) -> int:
        """Revoke every live grant whose id starts with `prefix`; how many that was.

        `prefix` must be a whole id level ending in `/`, from `grant_prefix`: e.g.
        `tenant/<t>/session/<s>/` ends one session, `tenant/<t>/` a whole tenant.
        """
        if not prefix.startswith("tenant/") or not prefix.endswith("/"):
            raise ValueError(f"a grant prefix starts with 'tenant/' and ends with '/': {prefix!r}")
        count = 0
        with self._lock:
            for grant_id, g in self._grants.items():
                if grant_id.startswith(prefix) and g.live(now):
                    self._grants[grant_id] = dataclasses.replace(g, revoked_at=now)
                    count += 1
        return count

    def revoke_ids(self, grant_ids: Sequence[str], *, now: float) -> list[Grant]:
        """Revoke, at `now`, those of `grant_ids` this process holds live, whoever owns
        them; the grants it revoked. For a revocation the records already hold (made by
        another server of a fleet, or found on re-reading them): ownership was checked by
        the server that made it."""
        revoked = []
        with self._lock:
            for grant_id in grant_ids:
                g = self._grants.get(grant_id)
                if g is not None and g.live(now):
                    g = self._grants[grant_id] = dataclasses.replace(g, revoked_at=now)
                    revoked.append(g)
        return revoked

    def live_of(self, tenant: str, grant_ids: Sequence[str], now: float) -> list[str]:
        """Those of `grant_ids` this process holds live for `tenant`."""
        with self._lock:
            found = (self._grants.get(grant_id) for grant_id in grant_ids)
            return [g.id for g in found if g is not None and g.tenant == tenant and g.live(now)]

    def live_for_session(self, tenant: str, session_id: str, now: float) -> list[Grant]:
        """The live grants of one session, oldest first."""
        with self._lock:
            grants = list(self._grants.values())
        return [
            g for g in grants if g.tenant == tenant and g.session_id == session_id and g.live(now)
        ]

    def all(self) -> list[Grant]:
        """Every grant this process still remembers, live or ended, oldest first (for audit)."""
        with self._lock:
            return list(self._grants.values())

    def forget_ended(self, before: float) -> int:
        """Drop grants that ended (expired or were revoked) before `before`; how many.

        Keeps memory bounded in a long-running server once their records are persisted.
        """
        with self._lock:
            # A revocation always comes before the expiry (only live grants are revoked).
            ended = [
                grant_id
                for grant_id, g in self._grants.items()
                if (g.expires_at if g.revoked_at is None else g.revoked_at) < before
            ]
            for grant_id in ended:
                del self._grants[grant_id]
        return len(ended)


def _made(
    capability: Capability,
    scope: Scope,
    *,
    grant_id: str,
    name: str,
    params: dict[str, str],
    tenant: str,
    session_id: str,
    approved_by: ApprovedBy,
    reason: str,
    created_at: float,
    expires_at: float,
) -> Grant:
    """A grant of `capability` as the policy states it: its secret, how it is injected, its
    TLS mode and private ranges come from there, never from a record."""
    inject = capability.inject
    return Grant(
        id=grant_id,
        tenant=tenant,
        session_id=session_id,
        capability=name,
        params=dict(params),
        scope=scope,
        secret=capability.secret,
        inject_header=inject.header if inject else None,
        inject_format=inject.format if inject else None,
        tls=capability.tls,
        allow_private=capability.allow_private,
        approved_by=approved_by,
        reason=reason,
        created_at=created_at,
        expires_at=expires_at,
    )

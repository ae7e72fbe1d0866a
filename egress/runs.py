"""Opening and closing one run's egress: token, CA, socket directory, proxy task.

`Egress.open` is an async context manager around the run: on entry it mints the
run token, creates the run's CA and socket directory (or binds in the directory
the sandbox was created with) and starts the proxy; on exit (however the run
ends) it stops the proxy, revokes the token and deletes what it created. The
rules a request is decided against are read from the broker on every request,
and open connections are re-checked while data flows, so a revocation or an
expiry takes effect at once.

Whether the run's grants may inject their secrets is decided here, once, when the run's
egress opens (`secrets`): a run opened with them withheld has rules that carry no secret
and a proxy that can look none up, whatever grants it was given.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio

from airlock.broker import Grant, Grants, RunClaims, RunTokens, Secret, Vault
from airlock.errors import EgressUnavailable
from airlock.policies import Capability, EgressSettings
from airlock.policies.capabilities import path_placeholders
from airlock.store import EgressRecord, private_dir

from .decision import Rule
from .ledger import RunIdentity, RunLedger
from .proxy import MAX_SOCKET_PATH, SOCKET_NAME, Resolver, RunProxy, system_resolver
from .tls import RunCA

SOCKET_DIR = "socket"
PRIVATE_DIR = "private"

SecretUse = Literal["inject", "withhold"]
"""Whether a run's proxy adds its grants' secrets ("inject": code the agent wrote) or sends
their requests without them ("withhold": a browser box, whose page could make its browser
send, and read back, any request to a granted host)."""


@dataclass(frozen=True)
class EgressPlan:
    """What the sandbox needs to reach its proxy: nothing secret but the run token."""

    socket_dir: Path
    ca_pem: str
    token: Secret


@dataclass
class RunEgress:
    plan: EgressPlan
    records: list[EgressRecord] = field(default_factory=list)


def _rule_of_grant(grant: Grant, secrets: SecretUse) -> Rule:
    # Withheld: the rule allows what the grant allows, with no secret to inject.
    inject = secrets == "inject"
    return Rule(
        id=grant.id,
        kind="capability",
        hosts=grant.scope.hosts,
        ports=grant.scope.ports,
        methods=grant.scope.methods,
        paths=grant.scope.paths,
        tls=grant.tls,
        allow_private=grant.allow_private,
        secret=grant.secret if inject else None,
        inject_header=grant.inject_header if inject else None,
        inject_format=grant.inject_format if inject else None,
        secret_withheld=not inject and grant.secret is not None,
    )


def _policy_rules(settings: EgressSettings) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            id=f"policy:{rule.name}",
            kind="policy",
            hosts=rule.hosts,
            ports=rule.ports,
            methods=rule.methods,
            paths=rule.paths,
            tls=rule.tls,
            allow_private=rule.allow_private,
        )
        for rule in settings.allow
    )


def _offers(capabilities: Mapping[str, Capability]) -> tuple[Rule, ...]:
    """What each capability the run could ask for would allow, for hints in denials.

    A `{param}` segment stands for any one segment here: the hint says which capability
    to ask for, and `request_capability` checks the actual values.
    """
    return tuple(
        Rule(
            id=name,
            kind="capability",
            hosts=cap.hosts,
            ports=cap.ports,
            methods=cap.methods,
            paths=tuple(_any_param(pattern) for pattern in cap.paths),
            tls=cap.tls,
        )
        for name, cap in capabilities.items()
        if cap.approval != "deny"
    )


def _any_param(pattern: str) -> str:
    if not path_placeholders(pattern):
        return pattern
    return "/".join("*" if s.startswith("{") and s.endswith("}") else s for s in pattern.split("/"))


def upstream_context(ca_file: str | None) -> ssl.SSLContext:
    """How the proxy verifies upstream servers: the system store, plus the operator's CA."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


class Egress:
    """Everything the proxies of one server share.

    No egress settings among them: each run names its tenant's (`tools.Services.policy_for`
    chooses them, their one owner), so no caller can fall back to another policy's.
    """

    def __init__(
        self,
        *,
        grants: Grants,
        tokens: RunTokens,
        vault: Vault,
        clock: Callable[[], float] = time.time,
        resolver: Resolver = system_resolver,
        root: Path | None = None,
    ) -> None:
        self._root = root
        self._grants = grants
        self._tokens = tokens
        self._vault = vault
        self._clock = clock
        self._resolver = resolver
        self._contexts: dict[str | None, ssl.SSLContext] = {}

    def needed(self, grants: Sequence[Grant], *, settings: EgressSettings) -> bool:
        """Whether a run with these grants, under its tenant's `settings`, has egress at all."""
        return bool(grants) or bool(settings.allow)

    @asynccontextmanager
    async def open(
        self,
        *,
        tenant: str,
        session_id: str,
        run_id: str,
        grants: Sequence[Grant],
        deadline: float,
        settings: EgressSettings,
        secrets: SecretUse,
        capabilities: Mapping[str, Capability] | None = None,
        socket_dir: Path | None = None,
        ca: RunCA | None = None,
        token: Secret | None = None,
    ) -> AsyncIterator[RunEgress]:
        """The run's egress under `settings`, those of the policy of the run's tenant.

        `capabilities` are those of the policy that applies to this run's tenant (never
        another's): a denial names the one that would allow the request.
        `socket_dir`: an existing, empty directory to listen in (the sandbox's egress
        directory, owned by the backend; only the socket is removed from it at the end).
        Missing: a directory of the run's own, removed at the end.
        `ca`: the CA the sandbox already trusts (a browser box's, made with the box: its
        one run's, or each of a kept browser's steps'); missing: a new one for this run.
        `token`: the run token value the sandbox already presents (a kept browser's, from
        its previous step: its Chromium caches it), bound to this run and its grants now;
        missing: a new value.
        `secrets`: "inject" adds each grant's secret as its capability says; "withhold"
        sends every request without one (no rule carries a secret, and the proxy can look
        none up, so should one slip through the request is denied, never injected). No
        default: every caller says which.
        """
        policy_rules = _policy_rules(settings)
        now = self._clock()
        expires_at = min([deadline, *(g.expires_at for g in grants)])
        token = self._tokens.mint(
            tenant=tenant,
            session_id=session_id,
            run_id=run_id,
            grant_ids=tuple(g.id for g in grants),
            expires_at=expires_at,
            now=now,
            again=token,
        )
        # A unix socket path holds at most 107 bytes, so run directories live in a short
        # place (the system's temporary directory by default), each made unguessable.
        if self._root is not None:
            private_dir(self._root)
        run_dir = Path(tempfile.mkdtemp(prefix="airlock-", dir=self._root))
        given = socket_dir is not None
        socket_dir = socket_dir or run_dir / SOCKET_DIR
        try:
            if len(str(socket_dir / SOCKET_NAME)) > MAX_SOCKET_PATH:
                raise EgressUnavailable(
                    f"the egress socket path under {socket_dir.parent} is too long for a unix "
                    "socket; set TMPDIR to a short directory"
                )
            if not given:
                # Only this directory is mounted into the sandbox; its user must be able
                # to enter it (the umask may have taken bits from mkdir's mode).
                socket_dir.mkdir()
                socket_dir.chmod(0o755)
            ca = ca or RunCA(run_id, run_dir / PRIVATE_DIR)
            egress = RunEgress(
                plan=EgressPlan(socket_dir=socket_dir, ca_pem=ca.pem.decode(), token=token)
            )
            ledger = RunLedger(
                RunIdentity(tenant=tenant, session_id=session_id, run_id=run_id),
                settings.limits,
                egress.records,
            )
            proxy = RunProxy(
                ledger,
                ca=ca,
                authorize=lambda presented: self._tokens.verify(
                    presented, run_id=run_id, now=self._clock()
                ),
                rules=lambda claims: self._rules(claims, policy_rules, secrets),
                offers=_offers(capabilities or {}),
                lookup_secret=self._lookup_secret if secrets == "inject" else _no_secret,
                upstream_tls=self._upstream_context(settings.upstream_ca_file),
                resolver=self._resolver,
            )
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(proxy.serve, socket_dir)
                    try:
                        yield egress
                    finally:
                        proxy.live = False
                        tg.cancel_scope.cancel()
            finally:
                # After every connection has kept its record: the summary goes last.
                ledger.close()
        finally:
            self._tokens.revoke_run(run_id)
            shutil.rmtree(run_dir, ignore_errors=True)
            if given:
                (socket_dir / SOCKET_NAME).unlink(missing_ok=True)

    def _upstream_context(self, ca_file: str | None) -> ssl.SSLContext:
        context = self._contexts.get(ca_file)
        if context is None:
            context = self._contexts[ca_file] = upstream_context(ca_file)
        return context

    def _rules(
        self, claims: RunClaims, policy_rules: Sequence[Rule], secrets: SecretUse
    ) -> list[Rule]:
        now = self._clock()
        rules = [
            _rule_of_grant(grant, secrets)
            for grant_id in claims.grant_ids
            if (
                grant := self._grants.get(
                    grant_id, tenant=claims.tenant, session_id=claims.session_id, now=now
                )
            )
            is not None
        ]
        rules.extend(policy_rules)
        return rules

    async def _lookup_secret(self, name: str) -> tuple[Secret, tuple[str, ...]] | None:
        return await anyio.to_thread.run_sync(self._vault.get, name)


async def _no_secret(name: str) -> None:
    """The vault of a run whose secrets are withheld: it holds nothing, so the proxy fails
    closed (denies) rather than injects, should a rule with a secret ever reach it."""
    return None

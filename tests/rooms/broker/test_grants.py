"""Tests of capability grants: ids, expiry, revocation, tenant isolation and quotas."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support import GITHUB, T0, make_grant

from airlock.broker import Grants, grant_prefix
from airlock.errors import InvalidRequest, LimitExceeded, QuotaExceeded
from airlock.policies import Capability, Scope, resolve_scope

SCOPE = resolve_scope(GITHUB, {"org": "acme"})


@pytest.fixture
def grants() -> Grants:
    return Grants()


def test_grant_id_is_hierarchical_with_128_random_bits(grants: Grants) -> None:
    g = make_grant(grants, tenant="acme", session_id="ses_abc")
    assert re.fullmatch(r"tenant/acme/session/ses_abc/cap/[a-z2-7]{26}", g.id)
    assert g.id.startswith(grant_prefix("acme", "ses_abc"))
    assert g.id.startswith(grant_prefix("acme"))


def test_grant_ids_are_unique(grants: Grants) -> None:
    many = Grants()
    ids = {make_grant(many, max_per_session=500, max_live_per_tenant=500).id for _ in range(500)}
    assert len(ids) == 500


def test_grant_records_what_was_granted(grants: Grants) -> None:
    params = {"org": "acme"}
    g = make_grant(grants, params=params, approved_by="user", ttl_s=60)
    assert (g.tenant, g.session_id, g.capability) == ("t1", "s1", "github-read")
    assert g.scope == SCOPE
    assert (g.secret, g.inject_header, g.inject_format) == (
        "github_token",
        "Authorization",
        "Bearer {secret}",
    )
    assert (g.created_at, g.expires_at, g.revoked_at) == (T0, T0 + 60, None)
    assert g.approved_by == "user"
    params["org"] = "changed"
    assert g.params == {"org": "acme"}


def test_grant_is_live_until_exactly_expires_at(grants: Grants) -> None:
    g = make_grant(grants, ttl_s=60)
    assert g.live(T0)
    assert g.live(T0 + 59.999)
    assert not g.live(T0 + 60)
    assert grants.get(g.id, tenant="t1", session_id="s1", now=T0 + 59.999) == g
    assert grants.get(g.id, tenant="t1", session_id="s1", now=T0 + 60) is None


@pytest.mark.parametrize(
    ("tenant", "session_id", "grant_id"),
    [
        ("t1", "s1", "tenant/t1/session/s1/cap/aaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ("t2", "s1", None),
        ("t1", "s2", None),
        ("t2", "s2", None),
    ],
    ids=["unknown-id", "other-tenant", "other-session", "other-both"],
)
def test_get_answers_none_for_unknown_or_foreign_ids(
    grants: Grants, tenant: str, session_id: str, grant_id: str | None
) -> None:
    g = make_grant(grants, tenant="t1", session_id="s1")
    assert grants.get(grant_id or g.id, tenant=tenant, session_id=session_id, now=T0) is None


def test_revoke_ends_the_grant_at_once(grants: Grants) -> None:
    g = make_grant(grants)
    revoked = grants.revoke(g.id, tenant="t1", now=T0 + 5)
    assert revoked is not None
    assert revoked.id == g.id
    assert revoked.revoked_at == T0 + 5
    assert not revoked.live(T0 + 5)
    assert grants.get(g.id, tenant="t1", session_id="s1", now=T0 + 5) is None
    assert grants.all() == [revoked]


def test_revoke_of_an_ended_grant_leaves_it_as_it_was(grants: Grants) -> None:
    g = make_grant(grants, ttl_s=10)
    first = grants.revoke(g.id, tenant="t1", now=T0 + 1)
    assert first is not None
    assert grants.revoke(g.id, tenant="t1", now=T0 + 2) == first
    expired = make_grant(grants, ttl_s=10)
    assert grants.revoke(expired.id, tenant="t1", now=T0 + 10) == expired


def test_revoke_works_from_any_session_of_the_tenant(grants: Grants) -> None:
    g = make_grant(grants, session_id="s1")
    assert grants.revoke(g.id, tenant="t1", now=T0) is not None


def test_revoke_of_another_tenants_grant_is_like_an_unknown_id(grants: Grants) -> None:
    g = make_grant(grants, tenant="t1")
    unknown = "tenant/t2/session/s1/cap/aaaaaaaaaaaaaaaaaaaaaaaaaa"
    assert grants.revoke(unknown, tenant="t2", now=T0) is None
    assert grants.revoke(g.id, tenant="t2", now=T0) is None
    assert grants.get(g.id, tenant="t1", session_id="s1", now=T0) == g


def test_revoke_prefix_ends_every_grant_of_one_session_and_no_other(grants: Grants) -> None:
    big = Grants()
    roomy: dict[str, Any] = {"max_per_session": 10, "max_live_per_tenant": 10}
    ending = [make_grant(big, "t1", "s1", **roomy) for _ in range(3)]
    same_tenant = make_grant(big, "t1", "s2", **roomy)
    prefix_tenant = make_grant(big, "t1", "s10", **roomy)  # "s1" is a string prefix of "s10"
    other_tenant = make_grant(big, "t10", "s1", **roomy)
    already = make_grant(big, "t1", "s1", **roomy)
    big.revoke(already.id, tenant="t1", now=T0)

    assert big.revoke_prefix(grant_prefix("t1", "s1"), now=T0 + 1) == 3

    assert all(big.get(g.id, tenant="t1", session_id="s1", now=T0 + 1) is None for g in ending)
    assert big.live_for_session("t1", "s1", T0 + 1) == []
    assert big.live_for_session("t1", "s2", T0 + 1) == [same_tenant]
    assert big.live_for_session("t1", "s10", T0 + 1) == [prefix_tenant]
    assert big.live_for_session("t10", "s1", T0 + 1) == [other_tenant]
    ended = {g.id: g.revoked_at for g in big.all()}
    assert [ended[g.id] for g in ending] == [T0 + 1] * 3
    assert ended[already.id] == T0


def test_revoke_prefix_of_a_tenant_ends_all_its_sessions(grants: Grants) -> None:
    make_grant(grants, "t1", "s1")
    make_grant(grants, "t1", "s2")
    kept = make_grant(grants, "t2", "s1")
    assert grants.revoke_prefix(grant_prefix("t1"), now=T0) == 2
    assert [g for g in grants.all() if g.live(T0)] == [kept]


@pytest.mark.parametrize("prefix", ["", "tenant/t1", "tenant/t1/session/s1", "t1/", "/"])
def test_revoke_prefix_refuses_a_prefix_that_is_not_a_whole_level(
    grants: Grants, prefix: str
) -> None:
    make_grant(grants)
    with pytest.raises(ValueError, match="ends with '/'"):
        grants.revoke_prefix(prefix, now=T0)
    assert len(grants.live_for_session("t1", "s1", T0)) == 1


def test_live_for_session_lists_live_grants_oldest_first(grants: Grants) -> None:
    a = make_grant(grants, ttl_s=100)
    b = make_grant(grants, ttl_s=10)
    c = make_grant(grants, ttl_s=100)
    make_grant(grants, session_id="s2")
    grants.revoke(c.id, tenant="t1", now=T0)
    assert grants.live_for_session("t1", "s1", T0) == [a, b]
    assert grants.live_for_session("t1", "s1", T0 + 10) == [a]


def test_session_quota_counts_only_live_grants(grants: Grants) -> None:
    first = make_grant(grants, ttl_s=10)
    second = make_grant(grants)
    make_grant(grants)
    with pytest.raises(QuotaExceeded) as info:
        make_grant(grants)
    assert info.value.quota == "max_per_session"
    assert info.value.limit == 3
    assert "max_per_session = 3" in str(info.value)
    assert isinstance(info.value, LimitExceeded)

    # Expired and revoked grants free their places.
    make_grant(grants, now=T0 + 10)
    grants.revoke(second.id, tenant="t1", now=T0 + 11)
    make_grant(grants, now=T0 + 11)
    assert len(grants.live_for_session("t1", "s1", T0 + 11)) == 3
    assert first not in grants.live_for_session("t1", "s1", T0 + 11)


def test_tenant_quota_counts_live_grants_across_sessions(grants: Grants) -> None:
    for session_id in ("s1", "s1", "s2", "s2", "s3"):
        make_grant(grants, session_id=session_id)
    with pytest.raises(QuotaExceeded) as info:
        make_grant(grants, session_id="s4")
    assert info.value.quota == "max_live_per_tenant"
    assert "max_live_per_tenant = 5" in str(info.value)
    make_grant(grants, tenant="t2", session_id="s4")  # another tenant has its own quota

    grants.revoke_prefix(grant_prefix("t1", "s2"), now=T0 + 1)
    make_grant(grants, session_id="s4", now=T0 + 1)
    make_grant(grants, session_id="s4", now=T0 + 1)
    with pytest.raises(QuotaExceeded):
        make_grant(grants, session_id="s4", now=T0 + 1)
    assert len(grants.live_for_session("t1", "s4", T0 + 1000)) == 0  # all expired by then
    make_grant(grants, session_id="s5", now=T0 + 1000)


@pytest.mark.parametrize("ttl_s", [0, -1])
def test_grant_refuses_a_ttl_below_one_second(grants: Grants, ttl_s: int) -> None:
    with pytest.raises(InvalidRequest, match="ttl_s"):
        make_grant(grants, ttl_s=ttl_s)


@pytest.mark.parametrize(
    "overrides",
    [{"approved_by": "agent"}, {"tenant": "a/b"}, {"session_id": ""}],
    ids=["unknown-approver", "slash-in-tenant", "empty-session"],
)
def test_grant_refuses_inconsistent_settings(grants: Grants, overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_grant(grants, **overrides)
    assert grants.all() == []


def test_passthrough_grant_reaches_any_method_and_path_of_its_hosts(grants: Grants) -> None:
    tunnel = Capability.model_validate({"hosts": ["db.example.com"], "tls": "passthrough"})
    g = make_grant(grants, capability=tunnel, params={})
    assert g.tls == "passthrough"
    assert (g.secret, g.inject_header, g.inject_format) == (None, None, None)
    assert g.scope == Scope(hosts=("db.example.com",), ports=(443,), methods=("*",), paths=("/**",))


@pytest.mark.parametrize(
    "fields",
    [
        {"hosts": ()},
        {"ports": ()},
        {"methods": ()},
        {"paths": ()},
        {"ports": (0,)},
        {"ports": (65536,)},
        {"hosts": "api.github.com"},
        {"ports": [443]},
        {"methods": ("",)},
    ],
    ids=repr,
)
def test_scope_refuses_empty_or_malformed_fields(fields: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "hosts": ("a.example.com",),
        "ports": (443,),
        "methods": ("GET",),
        "paths": ("/**",),
    }
    with pytest.raises(ValueError, match="Scope"):
        Scope(**(base | fields))


def test_scope_is_frozen_and_hashable() -> None:
    scope = Scope(hosts=("a.example.com",), ports=(443,), methods=("GET",), paths=("/",))
    assert hash(scope) == hash(
        Scope(hosts=("a.example.com",), ports=(443,), methods=("GET",), paths=("/",))
    )
    with pytest.raises(ValueError, match="frozen"):
        scope.hosts = ("b.example.com",)


def test_grants_are_hashable_despite_params(grants: Grants) -> None:
    g = make_grant(grants)
    assert g in {g}


def test_forget_ended_drops_only_grants_that_ended_before(grants: Grants) -> None:
    expired = make_grant(grants, ttl_s=10)
    revoked = make_grant(grants, ttl_s=100)
    live = make_grant(grants, ttl_s=100)
    grants.revoke(revoked.id, tenant="t1", now=T0 + 20)
    assert grants.forget_ended(T0 + 10) == 0
    assert grants.forget_ended(T0 + 11) == 1
    assert grants.forget_ended(T0 + 21) == 1
    assert [g.id for g in grants.all()] == [live.id]
    assert expired.id not in {g.id for g in grants.all()}


def test_live_of_names_only_the_tenants_own_live_grants(grants: Grants) -> None:
    alpha = make_grant(grants, tenant="alpha", ttl_s=60)
    ended = make_grant(grants, tenant="alpha", ttl_s=10)
    beta = make_grant(grants, tenant="beta", ttl_s=60)
    ids = [alpha.id, ended.id, beta.id, "tenant/alpha/session/s1/cap/unknown"]
    assert grants.live_of("alpha", ids, T0 + 30) == [alpha.id]
    assert grants.live_of("beta", ids, T0 + 30) == [beta.id]
    assert grants.live_of("gamma", ids, T0) == []

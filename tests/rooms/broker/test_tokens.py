"""Tests of run tokens: minting, verification, expiry, revocation, and what is stored."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from airlock.broker import RunClaims, RunTokens, Secret

T0 = 1_000_000.0
GRANTS = ("tenant/t1/session/s1/cap/aaaaaaaaaaaaaaaaaaaaaaaaaa",)


def mint(tokens: RunTokens, run_id: str = "run_a", **overrides: Any) -> Secret:
    args: dict[str, Any] = {
        "tenant": "t1",
        "session_id": "s1",
        "run_id": run_id,
        "grant_ids": GRANTS,
        "expires_at": T0 + 60,
        "now": T0,
    }
    args.update(overrides)
    return tokens.mint(**args)


def contains(obj: object, needle: str, seen: set[int] | None = None) -> bool:
    """Whether `needle` (as str, bytes or inside any string) is reachable from `obj`."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, str):
        return needle in obj
    if isinstance(obj, bytes | bytearray):
        return needle.encode() in obj
    if isinstance(obj, dict):
        return any(contains(k, needle, seen) or contains(v, needle, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return any(contains(v, needle, seen) for v in obj)
    if isinstance(obj, Secret):
        return contains(obj.reveal(), needle, seen)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return any(contains(getattr(obj, f.name), needle, seen) for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__"):
        return contains(vars(obj), needle, seen)
    return False


@pytest.fixture
def tokens() -> RunTokens:
    return RunTokens()


def test_minted_token_is_256_random_bits_wrapped_in_a_secret(tokens: RunTokens) -> None:
    token = mint(tokens)
    assert isinstance(token, Secret)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token.reveal())
    assert token.reveal() not in repr(token)
    assert mint(tokens).reveal() != token.reveal()


def test_verify_returns_the_claims_the_token_is_bound_to(tokens: RunTokens) -> None:
    token = mint(tokens, grant_ids=list(GRANTS))
    assert tokens.verify(token.reveal(), run_id="run_a", now=T0) == RunClaims(
        tenant="t1", session_id="s1", run_id="run_a", grant_ids=GRANTS, expires_at=T0 + 60
    )


def test_verify_is_valid_until_exactly_expires_at(tokens: RunTokens) -> None:
    token = mint(tokens).reveal()
    assert tokens.verify(token, run_id="run_a", now=T0 + 59.999) is not None
    assert tokens.verify(token, run_id="run_a", now=T0 + 60) is None
    assert tokens.verify(token, run_id="run_a", now=T0 + 3600) is None


def test_token_of_run_a_presented_for_run_b_is_none(tokens: RunTokens) -> None:
    a = mint(tokens, "run_a").reveal()
    b = mint(tokens, "run_b").reveal()
    assert tokens.verify(a, run_id="run_b", now=T0) is None
    assert tokens.verify(b, run_id="run_a", now=T0) is None
    assert tokens.verify(a, run_id="run_a", now=T0) is not None
    assert tokens.verify(b, run_id="run_b", now=T0) is not None


@pytest.mark.parametrize(
    "presented",
    ["", "x", "A" * 43, "é" * 43, "\ud800" * 43, "A" * 10_000],
    ids=["empty", "short", "unknown", "non-ascii", "lone-surrogates", "huge"],
)
def test_unknown_or_malformed_token_is_none(tokens: RunTokens, presented: str) -> None:
    mint(tokens)
    assert tokens.verify(presented, run_id="run_a", now=T0) is None


def test_token_with_changed_character_is_none(tokens: RunTokens) -> None:
    token = mint(tokens).reveal()
    altered = ("B" if token[0] == "A" else "A") + token[1:]
    assert tokens.verify(altered, run_id="run_a", now=T0) is None


def test_revoke_run_ends_every_token_of_that_run_only(tokens: RunTokens) -> None:
    first = mint(tokens, "run_a").reveal()
    second = mint(tokens, "run_a").reveal()
    other = mint(tokens, "run_b").reveal()
    tokens.revoke_run("run_a")
    assert tokens.verify(first, run_id="run_a", now=T0) is None
    assert tokens.verify(second, run_id="run_a", now=T0) is None
    assert tokens.verify(other, run_id="run_b", now=T0) is not None
    tokens.revoke_run("run_a")  # idempotent
    tokens.revoke_run("run_never")


def test_a_value_minted_again_is_bound_to_the_new_run_alone_and_never_to_two_at_once(
    tokens: RunTokens,
) -> None:
    """A kept browser's steps: the value of step one, bound to step two once step one ended."""
    first = mint(tokens, "run_step1")
    with pytest.raises(ValueError, match="still bound to another run"):
        mint(tokens, "run_step2", again=first)
    assert tokens.verify(first.reveal(), run_id="run_step1", now=T0) is not None
    tokens.revoke_run("run_step1")
    second = mint(tokens, "run_step2", again=first, grant_ids=())
    assert second.reveal() == first.reveal()
    claims = tokens.verify(second.reveal(), run_id="run_step2", now=T0)
    assert claims is not None and claims.grant_ids == ()
    assert tokens.verify(first.reveal(), run_id="run_step1", now=T0) is None
    tokens.revoke_run("run_step2")
    assert tokens.verify(second.reveal(), run_id="run_step2", now=T0) is None


def test_revoke_session_ends_the_sessions_tokens_and_counts_them(tokens: RunTokens) -> None:
    a = mint(tokens, "run_a").reveal()
    b = mint(tokens, "run_b").reveal()
    other_session = mint(tokens, "run_c", session_id="s2").reveal()
    other_tenant = mint(tokens, "run_d", tenant="t2").reveal()
    assert tokens.revoke_session("t1", "s1") == 2
    assert tokens.verify(a, run_id="run_a", now=T0) is None
    assert tokens.verify(b, run_id="run_b", now=T0) is None
    assert tokens.verify(other_session, run_id="run_c", now=T0) is not None
    assert tokens.verify(other_tenant, run_id="run_d", now=T0) is not None
    assert tokens.revoke_session("t1", "s1") == 0


def test_a_new_process_knows_no_token(tokens: RunTokens) -> None:
    token = mint(tokens).reveal()
    assert RunTokens().verify(token, run_id="run_a", now=T0) is None


def test_stored_state_contains_no_token_value(tokens: RunTokens) -> None:
    minted = [mint(tokens, f"run_{i}").reveal() for i in range(5)]
    assert contains(minted, minted[0])  # the search does find what is there
    for token in minted:
        assert not contains(tokens, token)
        assert not contains(tokens.__dict__, token)
    assert all(tokens.verify(t, run_id=f"run_{i}", now=T0) for i, t in enumerate(minted))


def test_forget_expired_drops_only_expired_tokens(tokens: RunTokens) -> None:
    mint(tokens, "run_a", expires_at=T0 + 10)
    live = mint(tokens, "run_b", expires_at=T0 + 20).reveal()
    assert tokens.forget_expired(T0 + 9) == 0
    assert tokens.forget_expired(T0 + 10) == 1
    assert tokens.verify(live, run_id="run_b", now=T0 + 10) is not None


@pytest.mark.parametrize(
    "overrides",
    [{"expires_at": T0}, {"expires_at": T0 - 1}, {"run_id": ""}, {"grant_ids": GRANTS[0]}],
    ids=["expires-now", "expired", "empty-run", "grant-ids-string"],
)
def test_mint_refuses_a_dead_or_unbound_token(tokens: RunTokens, overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        mint(tokens, **overrides)

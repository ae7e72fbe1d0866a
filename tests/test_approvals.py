"""Approvals without elicitation: a request that needs a human, from a client that cannot
ask one, waits for the operator; `airlock approvals` (a separate process sharing the
database) or the admin-scoped HTTP routes decide; the session that asked collects it once.

No sandbox runs here: a capability request never touches the engine.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult
from support import airlock_async, ask, serving_http, text_of

from airlock.errors import InvalidRequest
from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.server.approvals import decide
from airlock.server.auth import generate_api_key
from airlock.store import ApprovalRecord, Database, SessionRecord

pytestmark = pytest.mark.anyio

CAP = "ask-api"
POLICY: dict[str, Any] = {
    "capabilities": {
        CAP: {
            "description": "an API a human must approve",
            "params": {"org": "^[a-z]{1,10}$"},
            "hosts": ["api.example.com"],
            "methods": ["GET"],
            "paths": ["/orgs/{org}/**"],
            "approval": "ask",
        }
    }
}
POLICY_TOML = """
[capabilities.ask-api]
description = "an API a human must approve"
params = { org = "^[a-z]{1,10}$" }
hosts = ["api.example.com"]
methods = ["GET"]
paths = ["/orgs/{org}/**"]
approval = "ask"
"""
APPROVAL_ID = re.compile(r'approval_id="(apr_[a-z0-9]+)"')


async def pending_id(c: Client) -> tuple[str, str]:
    """Ask from a client without elicitation; the approval id and the session it binds."""
    waiting = await ask(c, CAP)
    assert waiting.is_error
    message = text_of(waiting)
    assert "cannot ask its user" in message and "waits until" in message
    match = APPROVAL_ID.search(message)
    assert match is not None, message
    session = re.search(r'session_id="(ses_[a-z0-9]+)"', message)
    assert session is not None
    return match.group(1), session.group(1)


async def approvals(data_dir: Path, *args: str) -> tuple[int, str, str]:
    """`airlock approvals ARGS` on `data_dir`: its exit code, stdout and stderr."""
    done = await airlock_async("approvals", *args, "--data-dir", str(data_dir))
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_operator_approval_from_another_process_grants_once_to_the_asking_session(
    tmp_path: Path, mode: str
) -> None:
    data_dir = tmp_path / "data"
    server = build_server(Config(data_dir=data_dir), Policy.model_validate(POLICY))
    async with Client(server, mode=mode) as c:
        approval, session = await pending_id(c)
        code, listed, _ = await approvals(data_dir, "list")
        assert code == 0 and approval in listed and "read acme" in listed

        still = await ask(c, CAP, approval_id=approval, session_id=session)
        assert still.is_error and "waits until" in text_of(still)

        code, out, err = await approvals(data_dir, "approve", approval)
        assert code == 0, err
        assert f"{approval} approved" in out
        granted = await ask(c, CAP, approval_id=approval, session_id=session)
        assert not granted.is_error, text_of(granted)
        assert granted.structured_content is not None
        assert granted.structured_content["approved_by"] == "operator"
        assert granted.structured_content["scope"]["paths"] == ["/orgs/acme/**"]
        assert granted.structured_content["session_id"] == session

        again = await ask(c, CAP, approval_id=approval, session_id=session)
        assert again.is_error and "already used" in text_of(again)
        twice, _, err = await approvals(data_dir, "approve", approval)
        assert twice == 1 and "is used, not pending" in err

        # Another session cannot use it (nor learn that it exists).
        with anyio.fail_after(30):
            await c.call_tool("end_session", {"session_id": session})
        foreign = await ask(c, CAP, approval_id=approval)
        assert foreign.is_error and "unknown approval" in text_of(foreign)

    db = await Database.open(data_dir / "airlock.db")
    try:
        (grant,) = await db.list_grants()
        record = await db.get_approval(approval)
    finally:
        await db.close()
    assert grant.approved_by == "operator"
    assert record is not None and record.status == "used" and record.grant_id == grant.id
    assert record.decided_by is not None and record.decided_by.startswith("cli:")


async def test_operator_denial_is_a_denial_and_session_end_expires_what_waits(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    server = build_server(Config(data_dir=data_dir), Policy.model_validate(POLICY))
    async with Client(server) as c:
        denied, session = await pending_id(c)
        code, out, _ = await approvals(data_dir, "deny", denied)
        assert code == 0 and f"{denied} denied" in out
        refused = await ask(c, CAP, approval_id=denied, session_id=session)
        assert refused.is_error and "the operator denied" in text_of(refused)

        left, _ = await pending_id(c)
        with anyio.fail_after(30):
            await c.call_tool("end_session", {"session_id": session})
        code, _, err = await approvals(data_dir, "approve", left)
        assert code == 1 and "is expired, not pending" in err
        code, listed, _ = await approvals(data_dir, "list", "--all")
        assert f"{left}  expired" in listed and f"{denied}  denied" in listed


async def test_an_explicit_no_from_the_human_stays_a_denial(tmp_path: Path) -> None:
    async def decline(context: Any, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    data_dir = tmp_path / "data"
    server = build_server(Config(data_dir=data_dir), Policy.model_validate(POLICY))
    async with Client(server, elicitation_callback=decline) as c:
        refused = await ask(c, CAP)
    assert refused.is_error and "did not approve" in text_of(refused)
    code, listed, _ = await approvals(data_dir, "list", "--all")
    assert code == 0 and listed.strip() == "no approvals recorded"


async def test_a_pending_approval_expires_closed_at_its_deadline(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "airlock.db")
    try:
        await db.create_session(
            SessionRecord(id="ses_a", tenant="t", created_at=0, last_used_at=0, expires_at=9e9)
        )
        record = ApprovalRecord(
            id="apr_a",
            tenant="t",
            session_id="ses_a",
            capability=CAP,
            params={},
            ttl_s=60,
            reason="r",
            status="pending",
            created_at=100,
            expires_at=200,
        )
        await db.create_approval(record)
        with pytest.raises(InvalidRequest, match="expired at"):
            await decide(db, "apr_a", approve=True, by="t", now=200)
        after = await db.get_approval("apr_a")
        assert after is not None and after.status == "expired"
        await db.create_approval(record.model_copy(update={"id": "apr_b"}))
        with pytest.raises(InvalidRequest, match="not pending"):
            await decide(db, "apr_a", approve=True, by="t", now=150)
        assert (await decide(db, "apr_b", approve=False, by="t", now=150)).status == "denied"
    finally:
        await db.close()


# ---- over HTTP ---------------------------------------------------------------------------


@asynccontextmanager
async def http_server(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, str]]]:
    keys: dict[str, str] = {}
    entries = []
    for name, tenant, admin in (
        ("acme-agent", "acme", False),
        ("acme-admin", "acme", True),
        ("globex-agent", "globex", False),
    ):
        key, digest = generate_api_key()
        keys[name] = key
        entries.append(
            f'[[keys]]\nid = "{name}"\ntenant = "{tenant}"\nhash = "{digest}"\n'
            f"admin = {'true' if admin else 'false'}\n"
        )
    (tmp_path / "auth.toml").write_text("\n".join(entries))
    (tmp_path / "policy.toml").write_text(POLICY_TOML)
    async with serving_http(
        "--auth",
        str(tmp_path / "auth.toml"),
        "--policy",
        str(tmp_path / "policy.toml"),
        "--data-dir",
        str(tmp_path / "data"),
    ) as serving:
        yield serving.base, keys


async def test_admin_keys_decide_their_own_tenants_approvals_over_http(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (base, keys):

        @asynccontextmanager
        async def agent(name: str) -> AsyncIterator[Client]:
            headers = {"Authorization": f"Bearer {keys[name]}"}
            async with httpx2.AsyncClient(headers=headers) as http:
                transport = streamable_http_client(f"{base}/mcp", http_client=http)
                async with Client(transport) as connected:
                    yield connected

        def auth(name: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {keys[name]}"}

        async with agent("acme-agent") as acme, agent("globex-agent") as globex:
            mine, session = await pending_id(acme)
            theirs, _ = await pending_id(globex)
            async with httpx.AsyncClient(base_url=base) as http:
                anonymous = await http.get("/approvals")
                not_admin = await http.get("/approvals", headers=auth("acme-agent"))
                listed = await http.get("/approvals", headers=auth("acme-admin"))
                foreign = await http.post(
                    f"/approvals/{theirs}/approve", headers=auth("acme-admin")
                )
                approved = await http.post(f"/approvals/{mine}/approve", headers=auth("acme-admin"))
                again = await http.post(f"/approvals/{mine}/deny", headers=auth("acme-admin"))
            granted = await ask(acme, CAP, approval_id=mine, session_id=session)
        assert anonymous.status_code == 401
        assert not_admin.status_code == 403
        assert listed.status_code == 200
        assert [a["id"] for a in listed.json()["approvals"]] == [mine]
        assert foreign.status_code == 404
        assert approved.status_code == 200 and approved.json()["status"] == "approved"
        assert approved.json()["decided_by"] == "http:acme-admin"
        assert again.status_code == 409
        assert not granted.is_error, text_of(granted)
        assert granted.structured_content is not None
        assert granted.structured_content["approved_by"] == "operator"


async def test_one_session_cannot_bury_the_operator_in_pending_approvals(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # The default policy's cap (5): no operator setting needed for the flood to stop.
    server = build_server(Config(data_dir=data_dir), Policy.model_validate(POLICY))
    async with Client(server) as c:
        first, session = await pending_id(c)
        # Many at once, as a flood would come: the count and the insert are one step.
        results: list[CallToolResult] = []

        async def one() -> None:
            results.append(await ask(c, CAP, session_id=session))

        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(one)
        texts = [text_of(r) for r in results]
        assert all(r.is_error for r in results)
        assert sum("waits until" in t for t in texts) == 4, texts
        refused = [t for t in texts if "waits until" not in t]
        assert len(refused) == 8
        assert all(
            "this session already has 5 capability requests waiting for the operator" in t
            and "[broker] max_pending_approvals_per_session = 5" in t
            and "Wait until the operator decides one" in t
            for t in refused
        ), refused[0]
        code, listed, _ = await approvals(data_dir, "list")
        assert code == 0 and listed.count(session) == 5

        # A decision frees one.
        code, _, err = await approvals(data_dir, "deny", first)
        assert code == 0, err
        again = await ask(c, CAP, session_id=session)
        assert "waits until" in text_of(again), text_of(again)
        full = await ask(c, CAP, session_id=session)
        assert "already has 5 capability requests waiting" in text_of(full)


async def test_new_sessions_cannot_bury_the_operator_either(tmp_path: Path) -> None:
    # session_id "new" starts a session on every transport, each with its own per-session
    # cap: the tenant's cap bounds them together.
    policy = {**POLICY, "broker": {"max_pending_approvals_per_tenant": 7}}
    server = build_server(Config(data_dir=tmp_path / "data"), Policy.model_validate(policy))
    async with Client(server) as c:
        texts = []
        for _ in range(3):
            first = await ask(c, CAP, session_id="new")
            texts.append(text_of(first))
            match = re.search(r'session_id="(ses_[a-z0-9]+)"', texts[-1])
            if match is not None:
                for _ in range(4):
                    texts.append(text_of(await ask(c, CAP, session_id=match.group(1))))
        # 5 in the first session, 2 in the second, then the tenant is full: 3 refused
        # in the second, and the third session's first request.
        waiting = [t for t in texts if "waits until" in t]
        refused = [t for t in texts if "waits until" not in t]
        assert len(waiting) == 7, texts
        assert len(refused) == 4 and all(
            "this tenant already has 7 capability requests waiting for the operator" in t
            and "[broker] max_pending_approvals_per_tenant = 7" in t
            for t in refused
        ), refused[0]


def test_the_pending_cap_is_a_positive_policy_number() -> None:
    assert Policy().broker.max_pending_approvals_per_session == 5
    with pytest.raises(ValueError, match="greater than 0"):
        Policy.model_validate({"broker": {"max_pending_approvals_per_session": 0}})


async def test_the_pending_cap_counts_one_session_and_only_what_still_waits(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "airlock.db")
    try:
        for sid in ("ses_a", "ses_b"):
            await db.create_session(
                SessionRecord(id=sid, tenant="t", created_at=0, last_used_at=0, expires_at=9e9)
            )

        def record(n: int, session: str, expires_at: float = 1000) -> ApprovalRecord:
            return ApprovalRecord(
                id=f"apr_{session}_{n}",
                tenant="t",
                session_id=session,
                capability=CAP,
                params={},
                ttl_s=60,
                reason="r",
                status="pending",
                created_at=100,
                expires_at=expires_at,
            )

        # One that waited past its deadline (not yet swept) holds no place.
        assert await db.create_approval(record(0, "ses_a", expires_at=100), max_pending=2) is None
        assert await db.create_approval(record(1, "ses_a"), max_pending=2) is None
        assert await db.create_approval(record(2, "ses_a"), max_pending=2) is None
        assert await db.create_approval(record(3, "ses_a"), max_pending=2) == "session"
        assert await db.get_approval("apr_ses_a_3") is None
        assert await db.create_approval(record(1, "ses_b"), max_pending=2) is None
        # The tenant's cap counts every session of the tenant.
        tenant_cap = {"max_pending": 2, "max_pending_tenant": 3}
        assert await db.create_approval(record(2, "ses_b"), **tenant_cap) == "tenant"
    finally:
        await db.close()

"""Approvals without elicitation: a request that needs a human, from a client that cannot
ask one, waits for the operator; `airlock approvals` (a separate process sharing the
database) or the admin-scoped HTTP routes decide; the session that asked collects it once.

No sandbox runs here: a capability request never touches the engine.
"""

from __future__ import annotations

import os
import re
import time
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
from support import airlock_async, ask, listening, serving_http, text_of

from airlock.broker import approvals as approval_moves
from airlock.errors import InvalidRequest
from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.server.approvals import decide
from airlock.server.auth import generate_api_key
from airlock.server.bearer import OPERATOR_TOKEN_FILE
from airlock.store import AnyNotice, ApprovalDecided, ApprovalRecord, Database, SessionRecord

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
PENDING_A = ApprovalRecord(
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
"""An approval of session ses_a of tenant t, waiting from 100 until 200."""
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


async def approvals(data_dir: Path, *args: str, store: str | None = None) -> tuple[int, str, str]:
    """`airlock approvals ARGS` on `data_dir` (and `store`): exit code, stdout, stderr."""
    # The URL holds the test database's password: through the environment, as --store
    # refuses one.
    env = {**os.environ, "AIRLOCK_STORE_URL": store} if store is not None else None
    done = await airlock_async("approvals", *args, "--data-dir", str(data_dir), env=env)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    ("mode", "database"), [("auto", "sqlite"), ("legacy", "sqlite"), ("auto", "postgresql")]
)
async def test_operator_approval_from_another_process_grants_once_to_the_asking_session(
    tmp_path: Path, mode: str, database: str, request: pytest.FixtureRequest
) -> None:
    data_dir = tmp_path / "data"
    # On PostgreSQL, the server and `airlock approvals --store URL` meet in its database.
    store = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    config = Config(data_dir=data_dir, store_url=store)
    server = build_server(config, Policy.model_validate(POLICY))
    async with Client(server, mode=mode) as c:
        approval, session = await pending_id(c)
        code, listed, _ = await approvals(data_dir, "list", store=store)
        assert code == 0 and approval in listed and "read acme" in listed

        # A call collecting it waits for the decision, which releases it (from another
        # process: found by re-reading the record).
        collected: list[CallToolResult] = []

        async def collect() -> None:
            collected.append(await ask(c, CAP, approval_id=approval, session_id=session))

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            code, out, err = await approvals(data_dir, "approve", approval, store=store)
            assert code == 0, err
            assert f"{approval} approved" in out
        (granted,) = collected
        assert not granted.is_error, text_of(granted)
        assert granted.structured_content is not None
        assert granted.structured_content["approved_by"] == "operator"
        assert granted.structured_content["scope"]["paths"] == ["/orgs/acme/**"]
        assert granted.structured_content["session_id"] == session

        again = await ask(c, CAP, approval_id=approval, session_id=session)
        assert again.is_error and "already used" in text_of(again)
        twice, _, err = await approvals(data_dir, "approve", approval, store=store)
        assert twice == 1 and "is used, not pending" in err

        # Another session cannot use it (nor learn that it exists).
        with anyio.fail_after(30):
            await c.call_tool("end_session", {"session_id": session})
        foreign = await ask(c, CAP, approval_id=approval)
        assert foreign.is_error and "unknown approval" in text_of(foreign)

    db = await Database.open(config.store)
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


async def test_a_pending_approval_expires_closed_at_its_deadline(
    store_at: Path | str,
) -> None:
    db = await Database.open(store_at)
    try:
        await db.create_session(
            SessionRecord(id="ses_a", tenant="t", created_at=0, last_used_at=0, expires_at=9e9)
        )
        record = PENDING_A
        await db.create_approval(record)
        with pytest.raises(InvalidRequest, match="expired at"):
            await decide(db, "apr_a", approve=True, by="t", now=200, notices=None)
        after = await db.get_approval("apr_a")
        assert after is not None and after.status == "expired"
        await db.create_approval(record.model_copy(update={"id": "apr_b"}))
        with pytest.raises(InvalidRequest, match="not pending"):
            await decide(db, "apr_a", approve=True, by="t", now=150, notices=None)
        assert (
            await decide(db, "apr_b", approve=False, by="t", now=150, notices=None)
        ).status == "denied"
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


async def test_the_pending_cap_counts_one_session_and_only_what_still_waits(
    store_at: Path | str,
) -> None:
    db = await Database.open(store_at)
    try:
        for sid in ("ses_a", "ses_b"):
            await db.create_session(
                SessionRecord(id=sid, tenant="t", created_at=0, last_used_at=0, expires_at=9e9)
            )

        def record(n: int, session: str, expires_at: float = 1000) -> ApprovalRecord:
            return PENDING_A.model_copy(
                update={"id": f"apr_{session}_{n}", "session_id": session, "expires_at": expires_at}
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


# ---- one owner of the moves (broker/approvals.py) ----------------------------------------

LIVE_WAIT = 1000.0
"""When the approvals of the table below stop waiting; the table decides at 150 (live)
or at 1000 (its wait passed)."""


async def _one_approval(tmp_path: Path, status: str, *, session_ended: bool = False) -> Database:
    db = await Database.open(tmp_path / "airlock.db")
    await db.create_session(
        SessionRecord(id="ses_a", tenant="t", created_at=0, last_used_at=0, expires_at=9e9)
    )
    if session_ended:
        await db.end_session("ses_a", ended_at=100, reason="test", containers_removed=0)
    await db.create_approval(
        ApprovalRecord.model_validate(
            {**PENDING_A.model_dump(), "status": status, "expires_at": LIVE_WAIT}
        )
    )
    return db


@pytest.mark.parametrize(
    ("status", "now", "session_ended", "expected", "after"),
    [
        # A pending approval, live: the operator's decision moves it.
        ("pending", 150, False, "approved", "approved"),
        # Its wait passed (not yet swept): refused, and marked expired.
        ("pending", LIVE_WAIT, False, "expired", "expired"),
        # Its session ended: refused, and marked expired.
        ("pending", 150, True, "session_ended", "expired"),
        # Decided, expired or used already: refused, unchanged.
        ("approved", 150, False, "not_pending", "approved"),
        ("denied", 150, False, "not_pending", "denied"),
        ("expired", 150, False, "not_pending", "expired"),
        ("used", 150, False, "not_pending", "used"),
    ],
)
async def test_the_state_machine_decides_only_a_live_pending_approval(
    tmp_path: Path, status: str, now: float, session_ended: bool, expected: str, after: str
) -> None:
    db = await _one_approval(tmp_path, status, session_ended=session_ended)
    try:
        record = await db.get_approval("apr_a")
        assert record is not None
        decided = await approval_moves.decide(db, record, approve=True, by="op", now=now)
        if isinstance(decided, approval_moves.Refused):
            assert decided.why == expected
        else:
            assert decided.status == expected and decided.decided_by == "op"
        stored = await db.get_approval("apr_a")
        assert stored is not None and stored.status == after
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("status", "now", "approve", "answered", "after"),
    [
        # Pending and live: the client's answer settles it, for the client.
        ("pending", 150, True, True, "used"),
        ("pending", 150, False, True, "denied"),
        # The operator decided first, or its wait passed: that stands.
        ("approved", 150, False, False, "approved"),
        ("denied", 150, True, False, "denied"),
        ("pending", LIVE_WAIT, True, False, "pending"),
    ],
)
async def test_the_client_answers_only_a_live_pending_approval(
    tmp_path: Path, status: str, now: float, approve: bool, answered: bool, after: str
) -> None:
    db = await _one_approval(tmp_path, status)
    try:
        record = await db.get_approval("apr_a")
        assert record is not None
        assert await approval_moves.answer(db, record, approve=approve, now=now) is answered
        stored = await db.get_approval("apr_a")
        assert stored is not None and stored.status == after
        if answered:
            assert stored.decided_by == approval_moves.CLIENT
            # Nothing left for the operator, nor for a second answer.
            refused = await approval_moves.decide(db, stored, approve=True, by="op", now=now)
            assert isinstance(refused, approval_moves.Refused) and refused.why == "not_pending"
            assert not await approval_moves.answer(db, record, approve=approve, now=now)
    finally:
        await db.close()


@pytest.mark.parametrize(
    ("status", "now", "expected", "after"),
    [
        ("approved", 150, "claimed", "used"),
        ("pending", 150, "pending", "pending"),
        # Past its wait a pending approval is expired, whether or not a sweep marked it.
        ("pending", LIVE_WAIT, "expired", "pending"),
        ("denied", 150, "denied", "denied"),
        ("expired", 150, "expired", "expired"),
        ("used", 150, "used", "used"),
    ],
)
async def test_the_state_machine_claims_only_an_approved_approval_and_once(
    tmp_path: Path, status: str, now: float, expected: str, after: str
) -> None:
    db = await _one_approval(tmp_path, status)
    try:
        record = await db.get_approval("apr_a")
        assert record is not None
        assert await approval_moves.claim(db, record, now=now) == expected
        stored = await db.get_approval("apr_a")
        assert stored is not None and stored.status == after
        if expected == "claimed":
            # The same record, claimed again (a racing call that read it approved): lost.
            assert await approval_moves.claim(db, record, now=now) == "used"
            await approval_moves.release(db, "apr_a", now=now)
            released = await db.get_approval("apr_a")
            assert released is not None and released.status == "approved"
    finally:
        await db.close()


async def test_every_path_that_moves_an_approval_refuses_an_illegal_move(tmp_path: Path) -> None:
    """The tool (collecting), `airlock approvals` and POST /approvals/... all go through
    `broker.approvals`: none of them moves a denied, expired or used approval."""
    data_dir = tmp_path / "data"
    now = [time.time()]
    policy = Policy.model_validate({**POLICY, "broker": {"approval_wait_s": 60}})
    async with serving_http("--data-dir", str(data_dir)) as http:
        operator = {
            "Authorization": f"Bearer {(data_dir / OPERATOR_TOKEN_FILE).read_text().strip()}"
        }
        server = build_server(Config(data_dir=data_dir), policy, clock=lambda: now[0])
        async with Client(server) as c:
            denied, session = await pending_id(c)
            expired, _ = await pending_id(c)
            used, _ = await pending_id(c)
            assert (await approvals(data_dir, "deny", denied))[0] == 0
            assert (await approvals(data_dir, "approve", used))[0] == 0
            assert not (await ask(c, CAP, approval_id=used, session_id=session)).is_error
            now[0] += 61  # `expired` waited past its deadline (by the server's clock)

            # The tool: collecting any of them is refused, and moves nothing.
            for approval, refusal in (
                (denied, "the operator denied"),
                (expired, "expired without a decision"),
                (used, "already used"),
            ):
                result = await ask(c, CAP, approval_id=approval, session_id=session)
                assert result.is_error and refusal in text_of(result), text_of(result)

            # The operator's two paths: approving or denying any of them is refused.
            async with httpx.AsyncClient(base_url=http.base) as client:
                for approval, status in ((denied, "denied"), (expired, "expired"), (used, "used")):
                    for action in ("approve", "deny"):
                        code, _, err = await approvals(data_dir, action, approval)
                        assert code == 1 and f"is {status}, not pending" in err, err
                        answer = await client.post(
                            f"/approvals/{approval}/{action}", headers=operator
                        )
                        assert answer.status_code == 409, answer.text
                        assert f"is {status}, not pending" in answer.json()["detail"]

    db = await Database.open(data_dir / "airlock.db")
    try:
        after = {a: await db.get_approval(a) for a in (denied, expired, used)}
    finally:
        await db.close()
    assert {a: r.status for a, r in after.items() if r is not None} == {
        denied: "denied",
        expired: "expired",
        used: "used",
    }
    used_record = after[used]
    assert used_record is not None and used_record.grant_id is not None


async def test_a_decision_on_the_cli_against_a_fleets_store_is_announced_to_the_fleet(
    tmp_path: Path, postgres_url: str
) -> None:
    """`airlock approvals approve --store postgresql://...` tells every replica at once (the
    request waiting on it is released by the notice, not by its next re-read)."""
    data_dir = tmp_path / "data"
    server = build_server(
        Config(data_dir=data_dir, store_url=postgres_url), Policy.model_validate(POLICY)
    )
    heard: list[AnyNotice] = []
    arrived = anyio.Event()

    async def note(notice: AnyNotice) -> None:
        heard.append(notice)
        arrived.set()

    async with Client(server) as c, listening(postgres_url, "srv_replica") as notices:
        notices.subscribe(note, "approval_decided")
        approval, session = await pending_id(c)
        code, _, err = await approvals(data_dir, "approve", approval, store=postgres_url)
        assert code == 0, err
        with anyio.fail_after(10):
            await arrived.wait()
    (notice,) = heard
    assert isinstance(notice, ApprovalDecided)
    assert (notice.approval_id, notice.session_id, notice.status) == (approval, session, "approved")
    assert notice.origin.startswith("cli-")

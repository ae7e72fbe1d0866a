"""The operator console's rules, driven in-process: the console app behind the request guard,
on a real SQLite store and blob store, its clock moved by the test (expiry never sleeps).

Sign-in takes the operator token only, into a signed, expiring HttpOnly SameSite=Strict
cookie; every form needs that cookie and the session's CSRF token; failed sign-ins are
limited and logged without what was typed; a decision is the broker's move, and a second
one gets the CLI's refusal; downloads are attachments; a screenshot is served only when it
is a well-formed PNG; every value is printed as inert, visible text. The real browser
against a real server is tests/end_to_end/test_console_browser.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from support import airlock_main, services_on, session_record

from airlock.errors import InvalidRequest
from airlock.policies import ConsoleSettings, Policy
from airlock.server.approvals import decide
from airlock.server.bearer import RouteAuth
from airlock.server.console import CONSOLE_PATH, console_app
from airlock.server.console.app import CSP, SecurityHeaders, environment
from airlock.server.console.files import attachment
from airlock.server.console.signin import FAILURE_WINDOW_S, MAX_FAILURES, ConsoleSessions
from airlock.server.console.views import Block
from airlock.server.guard import RequestGuard
from airlock.server.http import security_settings
from airlock.store import (
    ApprovalRecord,
    ArtifactRecord,
    BlobStore,
    Database,
    DrillRecord,
    RunRecord,
)
from airlock.tools import Services

pytestmark = pytest.mark.anyio

TOKEN = "alo_" + "A" * 43
TENANT_KEY = "ak_acme_not_the_operator_token"
ORIGIN = "http://127.0.0.1:8765"
SESSION_S = 60
# A 1x1 PNG: what `tools.images` accepts.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c49444154789c63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Console:
    http: httpx.AsyncClient
    services: Services
    clock: Clock
    app: Starlette

    async def csrf(self, path: str = "/console/sign-in") -> str:
        page = await self.http.get(path)
        found = CSRF_FIELD.search(page.text)
        assert found is not None, page.text
        return found.group(1)

    async def sign_in(self, token: str = TOKEN) -> httpx.Response:
        csrf = await self.csrf()
        return await self.http.post(
            "/console/sign-in", data={"csrf": csrf, "token": token}, headers={"Origin": ORIGIN}
        )

    async def post(self, path: str, csrf: str | None) -> httpx.Response:
        data = {"csrf": csrf} if csrf is not None else {"note": "no csrf field"}
        return await self.http.post(path, data=data, headers={"Origin": ORIGIN})


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    db = await Database.open(tmp_path / "airlock.db")
    clock = Clock()
    services = services_on(tmp_path, Policy(), db, clock=clock)
    app = console_app(
        serving=lambda: services,
        auth=RouteAuth(None, TOKEN),
        settings=ConsoleSettings(session_s=SESSION_S),
        policy_label="the test policy",
        clock=clock,
    )
    outer = Starlette(routes=[Mount(CONSOLE_PATH, app)])
    guarded = RequestGuard(
        outer, security_settings("127.0.0.1", 8765, [], []), forms_under=CONSOLE_PATH
    )
    transport = httpx.ASGITransport(app=guarded)
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
        assert isinstance(app, SecurityHeaders) and isinstance(app.app, Starlette)
        yield Console(http, services, clock, app.app)
    await db.close()


async def pending(services: Services, approval_id: str = "apr_one") -> ApprovalRecord:
    now = services.clock()
    await services.db.create_session(session_record("ses_one", tenant="acme", created_at=now))
    record = ApprovalRecord(
        id=approval_id,
        tenant="acme",
        session_id="ses_one",
        capability="github-read",
        params={"org": "acme"},
        ttl_s=900,
        reason="read the issues",
        status="pending",
        created_at=now,
        expires_at=now + 300,
    )
    assert await services.db.create_approval(record) is None
    return record


async def test_sign_in_takes_the_operator_token_only_into_a_strict_cookie(
    console: Console,
) -> None:
    # Not signed in: every page sends you to the form.
    page = await console.http.get("/console/approvals")
    assert page.status_code == 303 and page.headers["location"] == "/console/sign-in"
    form = await console.http.get("/console/sign-in")
    assert '<input type="password" name="token"' in form.text

    refused = await console.sign_in(TENANT_KEY)
    assert refused.status_code == 401
    assert "That is not this server" in refused.text
    assert (await console.http.get("/console/approvals")).status_code == 303

    signed = await console.sign_in()
    assert signed.status_code == 303 and signed.headers["location"] == "/console/"
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith("airlock_console=s.")
    for flag in ("HttpOnly", f"Max-Age={SESSION_S}", "Path=/console", "SameSite=strict"):
        assert flag in cookie, cookie
    assert "Secure" not in cookie  # plain HTTP here; behind TLS the cookie is Secure
    page = await console.http.get("/console/approvals")
    assert page.status_code == 200 and "Sign out" in page.text


async def test_an_expired_tampered_or_signed_out_cookie_opens_nothing(console: Console) -> None:
    await console.sign_in()
    cookie = console.http.cookies["airlock_console"]
    csrf = await console.csrf("/console/")

    body, _, mac = cookie.rpartition(".")
    console.http.cookies.set("airlock_console", f"{body}.{mac[:-1]}x", path="/console")
    assert (await console.http.get("/console/")).status_code == 303
    later = body.rsplit(".", 1)[0] + f".{int(console.clock.now) + 10_000}"
    console.http.cookies.set("airlock_console", f"{later}.{mac}", path="/console")
    assert (await console.http.get("/console/")).status_code == 303

    console.http.cookies.set("airlock_console", cookie, path="/console")
    assert (await console.http.get("/console/")).status_code == 200
    console.clock.now += SESSION_S
    # Expired: the page sends to the sign-in form, and a form is refused.
    assert (await console.http.get("/console/")).status_code == 303
    assert (await console.post("/console/sign-out", csrf)).status_code == 403

    console.clock.now -= SESSION_S
    assert (await console.post("/console/sign-out", csrf)).status_code == 303
    # Kept after signing out, the same cookie opens nothing.
    console.http.cookies.set("airlock_console", cookie, path="/console")
    assert (await console.http.get("/console/")).status_code == 303


async def test_every_form_needs_the_sessions_csrf_token(console: Console) -> None:
    record = await pending(console.services)
    await console.sign_in()
    csrf = await console.csrf("/console/")
    other = ConsoleSessions(SESSION_S, console.clock)
    foreign = other.csrf(other.sign_in())
    forms = [
        r.path.replace("{approval_id}", record.id)
        for r in console.app.routes
        if isinstance(r, Route) and r.methods == {"POST"} and r.path != "/sign-in"
    ]
    assert sorted(forms) == [
        "/approvals/apr_one/approve",
        "/approvals/apr_one/deny",
        "/sign-out",
    ]
    for path in forms:
        for wrong in (None, "", foreign, csrf[:-1] + "x"):
            refused = await console.post(CONSOLE_PATH + path, wrong)
            assert refused.status_code == 403, (path, wrong)
            assert "CSRF token" in refused.text
    # Nothing moved, and the session still works.
    approval = await console.services.db.get_approval(record.id)
    assert approval is not None and approval.status == "pending"
    assert (await console.http.get("/console/")).status_code == 200
    # The sign-in form takes its own ticket's token, not a session's.
    posted = await console.http.post(
        "/console/sign-in", data={"csrf": csrf, "token": TOKEN}, headers={"Origin": ORIGIN}
    )
    assert posted.status_code == 403


async def test_a_form_post_reaches_the_console_only_from_its_own_origin(console: Console) -> None:
    await pending(console.services)
    await console.sign_in()
    csrf = await console.csrf("/console/")
    approve = "/console/approvals/apr_one/approve"
    cases = [
        ({"Origin": "http://attacker.test"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, 403),
        ({}, 403),
        ({"Sec-Fetch-Site": "same-site"}, 403),
    ]
    for headers, status in cases:
        refused = await console.http.post(approve, data={"csrf": csrf}, headers=headers)
        assert refused.status_code == status, headers
    # Multipart and text bodies stay refused everywhere.
    multipart = await console.http.post(
        approve, files={"csrf": (None, csrf)}, headers={"Origin": ORIGIN}
    )
    assert multipart.status_code == 415
    approval = await console.services.db.get_approval("apr_one")
    assert approval is not None and approval.status == "pending"
    # A console page (Referrer-Policy: no-referrer, so Origin: null) posts it.
    done = await console.http.post(
        approve,
        data={"csrf": csrf},
        headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"},
    )
    assert done.status_code == 303
    approval = await console.services.db.get_approval("apr_one")
    assert approval is not None and approval.status == "approved"
    assert approval.decided_by == "console:operator"


async def test_failed_sign_ins_are_limited_and_logged_without_the_value(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "airlock.console")
    typed = [f"guess-{n}-{'x' * 20}" for n in range(MAX_FAILURES)]
    for guess in typed:
        assert (await console.sign_in(guess)).status_code == 401
    limited = await console.sign_in()
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert "Too many failed sign-ins" in limited.text
    assert (await console.http.get("/console/")).status_code == 303
    logged = caplog.text
    assert logged.count("not the operator token") == MAX_FAILURES
    assert "too many failed sign-ins" in logged
    assert not any(guess in logged for guess in typed) and TOKEN not in logged
    console.clock.now += FAILURE_WINDOW_S
    assert (await console.sign_in()).status_code == 303


async def test_a_decision_is_the_brokers_move_and_a_second_gets_the_clis_refusal(
    console: Console,
) -> None:
    record = await pending(console.services)
    await console.sign_in()
    csrf = await console.csrf("/console/approvals")
    page = await console.http.get("/console/approvals")
    assert page.status_code == 200 and 'id="approval-apr_one"' in page.text
    assert "(1) Approvals" in page.text  # the title counts the pending ones

    approved = await console.post("/console/approvals/apr_one/approve", csrf)
    assert approved.status_code == 303 and approved.headers["location"] == "/console/approvals"
    page = await console.http.get("/console/approvals")
    assert "apr_one approved: github-read for session ses_one of tenant acme" in page.text
    assert 'id="approval-apr_one"' not in page.text and "<title>Approvals" in page.text

    # What the CLI says to a second decision, said by the console too.
    with pytest.raises(InvalidRequest) as cli:
        await decide(
            console.services.db, record.id, approve=False, by="cli:x", now=console.clock(),
            notices=None,
        )  # fmt: skip
    await console.post("/console/approvals/apr_one/deny", csrf)
    page = await console.http.get("/console/approvals")
    assert f"Not decided: {cli.value}" in page.text
    assert str(cli.value) == "approval apr_one is approved, not pending"
    approval = await console.services.db.get_approval(record.id)
    assert approval is not None and approval.status == "approved"


async def test_pages_print_every_stored_value_as_visible_inert_text(console: Console) -> None:
    hostile = '<script>alert(1)</script></textarea><img src=x onerror="alert(2)">\u202egnp\x1b[31m'
    record = await pending(console.services)
    # A tampered record (the database is not trusted either): its reason is hostile.
    await console.services.db.create_approval(
        record.model_copy(update={"id": "apr_two", "reason": hostile})
    )
    await console.sign_in()
    page = (await console.http.get("/console/approvals")).text
    assert "<script>alert" not in page and "<img" not in page
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/textarea&gt;&lt;img src=x "
        "onerror=&#34;alert(2)&#34;&gt;&lt;U+202E&gt;gnp&lt;U+001B&gt;[31m"
    ) in page
    assert "\u202e" not in page and "\x1b" not in page


def test_the_environment_escapes_every_value_and_keeps_its_own_markup() -> None:
    env = environment()
    rendered = env.from_string("<p>{{ line }}</p><pre>{{ block }}</pre>{{ mine }}").render(
        line="a\nb\u202e<b>",
        block=Block("one\n\ttwo\u200b\x1b[0m<i>"),
        mine=Markup("<em>ours</em>"),
    )
    assert rendered == (
        "<p>a&lt;U+000A&gt;b&lt;U+202E&gt;&lt;b&gt;</p>"
        "<pre>one\n\ttwo&lt;U+200B&gt;&lt;U+001B&gt;[0m&lt;i&gt;</pre><em>ours</em>"
    )


def test_a_download_names_its_file_without_letting_the_name_act() -> None:
    assert attachment('dir/java"script:x.txt') == (
        "attachment; filename=\"java_script_x.txt\"; filename*=UTF-8''java%22script%3Ax.txt"
    )
    assert attachment("a\r\nSet-Cookie: x=1").startswith(
        'attachment; filename="a__Set-Cookie__x_1"'
    )


async def stored_run(services: Services, *, kind: str, files: dict[str, bytes]) -> RunRecord:
    now = services.clock()
    await services.db.create_session(session_record("ses_run", tenant="acme", created_at=now))
    run = RunRecord(
        id="run_one",
        session_id="ses_run",
        tenant="acme",
        language=kind,  # type: ignore[arg-type]
        status="ok",
        created_at=now,
        timeout_s=30,
        limits={},
        code_sha256=await services.blobs.put(b"print('<b>hi</b>')"),
        exit_code=0,
    )
    await services.db.create_run(run)
    blobs: BlobStore = services.blobs
    records = [
        ArtifactRecord(
            run_id=run.id,
            path=path,
            size=len(data),
            sha256=await blobs.put(data),
            mime_type="text/html",
            tenant="acme",
            created_at=now,
        )
        for path, data in files.items()
    ]
    await services.db.add_artifacts(records)
    return run


async def test_artifacts_download_as_attachments_never_inline(console: Console) -> None:
    body = b"<script>alert(1)</script>"
    await stored_run(console.services, kind="python", files={'javascript:x".html': body})
    await console.sign_in()
    page = (await console.http.get("/console/runs/run_one")).text
    href = "/console/runs/run_one/artifacts/javascript%3Ax%22.html"
    assert f'href="{href}"' in page and "javascript:x&#34;.html" in page
    got = await console.http.get(href)
    assert got.status_code == 200 and got.content == body
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"].startswith("attachment;")
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in got.headers["content-security-policy"]
    assert (await console.http.get("/console/runs/run_one/artifacts/nope")).status_code == 404


@pytest.mark.parametrize(
    ("data", "shown"), [(PIXEL, True), (PIXEL[:-5], False), (b"<svg/>", False)]
)
async def test_a_browse_screenshot_is_served_only_as_a_validated_png(
    console: Console, data: bytes, shown: bool
) -> None:
    await stored_run(console.services, kind="browse", files={"screenshot.png": data})
    await console.sign_in()
    page = (await console.http.get("/console/runs/run_one")).text
    image = await console.http.get("/console/runs/run_one/screenshot")
    assert ('class="screenshot"' in page) is shown
    if shown:
        assert image.status_code == 200 and image.content == data
        assert image.headers["content-type"] == "image/png"
    else:
        assert image.status_code == 404 and image.headers["content-type"].startswith("text/html")


async def test_every_response_carries_the_strict_headers(console: Console) -> None:
    await console.sign_in()
    for path in ("/console/sign-in", "/console/", "/console/static/console.js", "/console/nope"):
        response = await console.http.get(path)
        assert response.headers["content-security-policy"] == CSP, path
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in CSP and "'unsafe-inline'" not in CSP
    assert "default-src 'self'" in CSP


async def test_the_review_shows_the_clis_warnings_and_the_last_drill(console: Console) -> None:
    for n, failed in ((1, 0), (2, 1)):
        await console.services.db.record_drill(
            DrillRecord(
                id=f"drl_{n}",
                target="the server policy (test)",
                tenant="airlock-drill",
                started_at=console.clock() + n,
                finished_at=console.clock() + n,
                held=1,
                failed=failed,
                not_applicable=0,
                sessions=[],
                rows=[
                    {
                        "attack": "metadata <b>",
                        "expected": "refused",
                        "observed": "ok",
                        "held": True,
                    },
                    {"attack": "dns", "expected": "refused", "observed": "got out", "held": False},
                ][: 1 + failed],
            )
        )
    await console.sign_in()
    page = (await console.http.get("/console/review")).text
    assert "Drill drl_2 at" in page and "1 attack(s) got through" in page
    assert '<tr class="warning">' in page and "metadata &lt;b&gt;" in page
    assert "The policy has no egress allow rules and no capabilities." in page
    refused = await console.http.get("/console/review?since=soon")
    assert refused.status_code == 400 and "is not a duration" in refused.text


def test_console_listen_is_for_a_stdio_server() -> None:
    done = airlock_main("serve", "--http", "--console-listen", "127.0.0.1:8766")
    assert done.returncode == 1
    assert "--console-listen is for a stdio server" in done.stderr
    assert "drop --console-listen" in done.stderr

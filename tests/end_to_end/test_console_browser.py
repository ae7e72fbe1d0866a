"""The operator console in a real browser: Debian's Chromium, driven by Playwright through
`executable_path` (never a browser Playwright downloads), against a real `airlock serve
--http` subprocess (and a stdio one with `--console-listen`), real sandboxes and a real
local HTTPS upstream.

A person signs in with the operator token, approves an agent's request with one click and
its run then reaches the upstream, denies another and the agent reads the denial; what a
sandbox, a page and the egress log wrote shows as text and runs nothing (no script error,
no dialog, no element the payload named, no CSP violation); forged and stale requests are
refused. Every page is saved as a screenshot under `console-screenshots/` (git ignores
it) for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult
from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Cookie,
    Dialog,
    Locator,
    Page,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from support import (
    AIRLOCK,
    EGRESS_PRELUDE,
    NO_POOL_TOML,
    airlock_async,
    call,
    client,
    free_port,
    http_server,
    text_of,
    vault_key_file,
    without_airlock_settings,
)
from upstream import Upstream

from airlock.broker.vault import KEY_FILE_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CHROMIUM = Path("/usr/bin/chromium")
# Outside a container Chromium runs as root only without its sandbox; the rest keeps it
# from calling hosts this closed network refuses (shared/notes/real-services.md).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(__file__).parent / "console-screenshots"
WAIT_MS = 20_000
"""How long the browser waits for what a page will show (the poll refreshes every 3 s)."""
ASK, AUTO, SITE = "ask-api", "local-api", "site"
REASON = "fetch the weekly report for the summary"
APPROVAL_ID = re.compile(r'approval_id="(apr_[a-z0-9]+)"')
SESSION_ID = re.compile(r'session_id="(ses_[a-z0-9]+)"')
# Everything a page of the console may hold: our links, forms, one script, a screenshot.
DOM_CHECK = """() => {
  const onAttributes = [];
  for (const element of document.querySelectorAll("*")) {
    for (const attribute of element.attributes) {
      if (attribute.name.toLowerCase().startsWith("on")) {
        onAttributes.push(element.tagName + " " + attribute.name);
      }
    }
  }
  const ours = (url) => url.origin === location.origin && url.pathname.startsWith("/console/");
  return {
    onAttributes,
    images: [...document.images].filter((i) => !i.classList.contains("screenshot")).length,
    scripts: [...document.scripts].filter((s) => !ours(new URL(s.src || "x:"))).length,
    links: [...document.querySelectorAll("a")].filter((a) => !ours(new URL(a.href || "x:")))
      .map((a) => a.getAttribute("href")),
    forms: [...document.forms].filter((f) => !ours(new URL(f.action))).length,
    named: document.querySelectorAll(
      "textarea, iframe, object, embed, svg, math, frame, base, meta[http-equiv]"
    ).length,
    pwned: window.__pwned === undefined ? null : String(window.__pwned),
  };
}"""
CLEAN_DOM = {
    "onAttributes": [],
    "images": 0,
    "scripts": 0,
    "links": [],
    "forms": 0,
    "named": 0,
    "pwned": None,
}


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{message}; CI installs it (.ci/run)")
        pytest.skip(message)
    return CHROMIUM


@dataclass
class Watch:
    """What the pages of one browser context said that they should not have."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def page_of(self, page: Page) -> Page:
        def on_console(message: ConsoleMessage) -> None:
            # Chromium fetches /favicon.ico by itself for a page that names no icon (the
            # guard's plain-text refusals): its 404 is the browser's doing, not a page's.
            if message.location.get("url", "").endswith("/favicon.ico"):
                return
            if message.type in ("error", "warning"):
                self.errors.append(f"console {message.type}: {message.text}")

        async def on_dialog(dialog: Dialog) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            await dialog.dismiss()

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("dialog", on_dialog)
        return page

    def clean(self) -> None:
        assert self.errors == [] and self.dialogs == [], (self.errors, self.dialogs)


@asynccontextmanager
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            await launched.close()


async def watched(
    browser: Browser, watch: Watch, *, javascript: bool = True
) -> tuple[BrowserContext, Page]:
    context = await browser.new_context(java_script_enabled=javascript, accept_downloads=False)
    context.set_default_timeout(WAIT_MS)
    return context, watch.page_of(await context.new_page())


def operator_token(data_dir: Path) -> str:
    return (data_dir / "operator-token").read_text().strip()


async def sign_in(page: Page, base: str, token: str) -> None:
    await page.goto(f"{base}/console")
    await page.locator('input[type="password"][name="token"]').fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{base}/console/")


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def dom_of(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = await page.evaluate(DOM_CHECK)
    return found


def policy_toml(upstream: Upstream, ca_file: Path, *, extra: str = "") -> str:
    port = upstream.port
    capability = f"""
hosts = ["localhost"]
ports = [{port}]
allow_private = ["127.0.0.0/8", "::1/128"]
"""
    return f"""
[pool]
size = 0
[sandbox]
runtime = "runc"
[limits]
timeout_s = 60
[egress]
upstream_ca_file = "{ca_file}"
[browser]
timeout_s = 60
[capabilities.{ASK}]
description = "the test upstream's API, approved by a person"
methods = ["GET"]
paths = ["/api/**"]
approval = "ask"
{capability}
[capabilities.{AUTO}]
description = "the test upstream's API"
methods = ["GET"]
paths = ["/api/**"]
approval = "auto"
{capability}
[capabilities.{SITE}]
description = "the test upstream's pages, for browse"
methods = ["GET", "HEAD"]
paths = ["/**"]
approval = "auto"
{capability}
{extra}
"""


async def ask(c: Client, reason: str = REASON) -> tuple[str, str]:
    """request_capability for ASK from a client that cannot elicit: the approval id it
    waits as and its session."""
    waiting = await call(c, "request_capability", {"capability": ASK, "reason": reason})
    message = text_of(waiting)
    assert waiting.is_error and "cannot ask its user" in message, message
    approval, session = APPROVAL_ID.search(message), SESSION_ID.search(message)
    assert approval is not None and session is not None, message
    return approval.group(1), session.group(1)


async def collect(c: Client, approval: str, session: str) -> CallToolResult:
    return await call(
        c,
        "request_capability",
        {"capability": ASK, "reason": REASON, "approval_id": approval, "session_id": session},
    )


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    content: dict[str, Any] = result.structured_content
    return content


async def give_back(context: BrowserContext, cookie: Cookie, value: str) -> None:
    """Set `cookie` again with `value`, and no expiry (the browser keeps it)."""
    await context.add_cookies(
        [
            {
                "name": cookie["name"],
                "value": value,
                "domain": cookie["domain"],
                "path": cookie["path"],
                "httpOnly": cookie["httpOnly"],
                "secure": cookie["secure"],
                "sameSite": cookie["sameSite"],
            }
        ]
    )


def menu(page: Page) -> Locator:
    """The menu every signed-in page has."""
    return page.get_by_role("navigation", name="Console pages")


def row(page: Page, approval: str) -> Locator:
    return page.locator(f"#approval-{approval}")


async def test_a_person_approves_and_denies_in_one_click_and_the_agent_sees_it(
    tmp_path: Path,
    chromium: Path,
    upstream: Upstream,
    upstream_ca_file: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(upstream, upstream_ca_file))
    watch = Watch()
    async with (
        http_server(tmp_path, "--policy", str(policy), "--store", postgres_url) as server,
        client(server, "acme", "auto") as agent,
        browser(chromium) as chrome,
    ):
        _, page = await watched(chrome, watch)
        await sign_in(page, server.base, operator_token(server.data_dir))
        await shot(page, "home")
        await menu(page).get_by_role("link", name=re.compile("^Approvals")).click()
        await page.wait_for_url(f"{server.base}/console/approvals")
        assert await page.title() == "Approvals · Airlock console"

        # The agent asks; the open page shows the request and counts it, with no reload.
        approval, session = await ask(agent)
        pending = row(page, approval)
        await pending.wait_for()
        await page.wait_for_function("document.title.startsWith('(1) ')")
        for text in ("acme", session, ASK, REASON):
            assert text in await pending.inner_text()
        await shot(page, "approvals")

        # One click approves; the agent collects the grant and its run reaches the upstream.
        await pending.get_by_role("button", name="Approve").click()
        await page.get_by_text(f"{approval} approved: {ASK} for session {session}").wait_for()
        granted = structured(await collect(agent, approval, session))
        assert granted["approved_by"] == "operator"
        run = structured(
            await call(
                agent,
                "run_code",
                {
                    "code": EGRESS_PRELUDE
                    + f"report(**fetch('https://localhost:{upstream.port}/api/report'))",
                    "capabilities": [granted["capability_id"]],
                    "session_id": session,
                },
            )
        )
        assert run["status"] == "ok", run
        assert json.loads(run["stdout"]["text"].splitlines()[-1])["status"] == 200
        assert "/api/report" in upstream.paths()
        assert await page.title() == "Approvals · Airlock console"

        # One click denies; the agent reads the denial.
        denied, denied_session = await ask(agent)
        await row(page, denied).wait_for()
        await row(page, denied).get_by_role("button", name="Deny").click()
        await page.get_by_text(f"{denied} denied").wait_for()
        refused = await collect(agent, denied, denied_session)
        assert refused.is_error
        assert f"the operator denied approval {denied} ('{ASK}')" in text_of(refused)

        # Decided elsewhere (the CLI, as another replica would): the open page drops the
        # row by itself; a page without JavaScript still shows it, and its Deny gets the
        # CLI's own refusal.
        stale, _ = await ask(agent)
        await row(page, stale).wait_for()
        plain_context, plain = await watched(chrome, watch, javascript=False)
        await sign_in(plain, server.base, operator_token(server.data_dir))
        await plain.goto(f"{server.base}/console/approvals")
        await row(plain, stale).wait_for()
        store = ("--data-dir", str(server.data_dir), "--store", postgres_url)
        done = await airlock_async("approvals", "approve", stale, *store)
        assert done.returncode == 0, done.stderr
        await row(page, stale).wait_for(state="detached")
        await row(plain, stale).get_by_role("button", name="Deny").click()
        again = await airlock_async("approvals", "deny", stale, *store)
        refusal = f"approval {stale} is approved, not pending"
        assert again.returncode == 1 and refusal in again.stderr
        await plain.get_by_text(f"Not decided: {refusal}").wait_for()
        await plain_context.close()
        await page.reload()
        history = page.locator("tr", has_text=stale)
        assert "approved" in await history.inner_text() and "cli:" in await history.inner_text()

        # The session's page lists its run; the fleet page shows this replica's claim.
        await menu(page).get_by_role("link", name="Sessions and runs").click()
        await page.get_by_role("link", name=session).first.click()
        await page.get_by_role("link", name=run["run_id"]).click()
        await page.get_by_text("/api/report").first.wait_for()
        await menu(page).get_by_role("link", name="Fleet").click()
        replica = page.locator("tr", has_text="(this server)")
        text = await replica.inner_text()
        assert "held (PostgreSQL backend" in text and " ago)" in text, text
        await shot(page, "fleet")
        assert await dom_of(page) == CLEAN_DOM
    watch.clean()


HOSTILE_LINES = (
    "<script>window.__pwned='script';alert('script')</script>",
    "</textarea><img src=x onerror=\"window.__pwned='img';alert('img')\">",
    "<a href=\"javascript:alert('link')\">click me</a>",
    "\x1b[31mred alert\x1b[0m and \u202egnp.exe\u202c and zero\u200bwidth",
)
HOSTILE_FILES = ("javascript:x.txt", 'quote".txt', "apos'&amp;.txt", "onerror=alert(5).txt")
HOSTILE_TARGETS = ("<img/src=x/onerror=alert(7)>:443", '"><script>alert(8)</script>:443')
HOSTILE_CODE = (
    EGRESS_PRELUDE
    + f"""
import sys
for line in {HOSTILE_LINES!r}:
    print(line)
print("<svg onload=alert('stderr')>", file=sys.stderr)
for name in {HOSTILE_FILES!r}:
    with open(name, "w") as f:
        f.write("<script>alert('file')</script>")
for target in {HOSTILE_TARGETS!r}:
    print(raw_connect(target))
"""
)
HOSTILE_PAGE = (
    "<title>&lt;script&gt;alert('title')&lt;/script&gt;</title>"
    "<h1>Hostile page</h1><p>\u202eevil text</p>"
    "<script>console.log('the page ran, inside its box')</script>"
)


async def test_what_sandboxes_pages_and_the_egress_log_wrote_is_inert_text(
    tmp_path: Path,
    chromium: Path,
    upstream: Upstream,
    upstream_ca_file: Path,
    browser_image: str,
) -> None:
    upstream.pages["/hostile"] = ("text/html; charset=utf-8", HOSTILE_PAGE.encode(), ())
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(upstream, upstream_ca_file))
    watch = Watch()
    async with (
        http_server(tmp_path, "--policy", str(policy)) as server,
        client(server, "acme", "auto") as agent,
        browser(chromium) as chrome,
    ):
        grant = structured(
            await call(agent, "request_capability", {"capability": AUTO, "reason": "test"})
        )
        run = structured(
            await call(
                agent,
                "run_code",
                {
                    "code": HOSTILE_CODE,
                    "capabilities": [grant["capability_id"]],
                    "session_id": grant["session_id"],
                },
            )
        )
        assert run["status"] == "ok", run
        session = run["session_id"]
        kept = {a["path"] for a in run["artifacts"]}
        assert set(HOSTILE_FILES) <= kept, kept
        site = structured(
            await call(
                agent,
                "request_capability",
                {"capability": SITE, "reason": "test", "session_id": session},
            )
        )
        browsed = structured(
            await call(
                agent,
                "browse",
                {
                    "url": f"https://localhost:{upstream.port}/hostile",
                    "capabilities": [site["capability_id"]],
                    "session_id": session,
                },
            )
        )
        assert browsed["status"] == "ok", browsed
        await ask(agent, reason=HOSTILE_LINES[1] + " " + HOSTILE_LINES[3])

        _, page = await watched(chrome, watch)
        await sign_in(page, server.base, operator_token(server.data_dir))
        pages = {
            "run": f"/console/runs/{run['run_id']}",
            "browse-run": f"/console/runs/{browsed['run_id']}",
            "session": f"/console/sessions/{session}",
            "sessions": "/console/sessions",
            "approvals-hostile": "/console/approvals",
            "review": "/console/review",
        }
        for name, path in pages.items():
            await page.goto(server.base + path)
            assert await dom_of(page) == CLEAN_DOM, name
            await shot(page, name)

        # The run's page shows every payload as the characters it is made of.
        await page.goto(server.base + pages["run"])
        shown = await page.locator("main").inner_text()
        for line in HOSTILE_LINES[:3]:
            assert line in shown
        assert "<U+001B>[31mred alert<U+001B>[0m and <U+202E>gnp.exe<U+202C>" in shown
        assert "zero<U+200B>width" in shown and "<svg onload=alert('stderr')>" in shown
        for name in HOSTILE_FILES:
            assert name in shown
        # The refused CONNECT targets, as written, in the egress table.
        hosts = await page.locator("table.egress td.host").all_inner_texts()
        for target in HOSTILE_TARGETS:
            assert target in hosts, hosts
        # Downloads are attachments that nothing opens inline.
        link = page.get_by_role("row", name=re.compile("javascript:x.txt")).get_by_role("link")
        href = await link.get_attribute("href")
        assert href == f"/console/runs/{run['run_id']}/artifacts/javascript%3Ax.txt"
        got = await page.request.get(server.base + href)
        assert got.status == 200 and await got.body() == b"<script>alert('file')</script>"
        assert got.headers["content-type"] == "application/octet-stream"
        assert got.headers["content-disposition"].startswith("attachment;")
        assert got.headers["x-content-type-options"] == "nosniff"

        # The browse run shows its validated screenshot from the console's own route, and
        # the page's title as text.
        await page.goto(server.base + pages["browse-run"])
        image = page.locator("img.screenshot")
        assert await image.get_attribute("src") == (f"/console/runs/{browsed['run_id']}/screenshot")
        assert await image.evaluate("(i) => i.complete && i.naturalWidth") > 0
        shown = await page.locator("main").inner_text()
        # The box's report of the page, as the JSON it wrote (which escapes the bidi mark).
        assert '"title": "<script>alert(\'title\')</script>"' in shown
        assert "\\u202eevil text" in shown
        screenshot = await page.request.get(
            f"{server.base}/console/runs/{browsed['run_id']}/screenshot"
        )
        assert screenshot.headers["content-type"] == "image/png"

        # The hostile reason sits in its row as text.
        await page.goto(server.base + pages["approvals-hostile"])
        reason = await page.locator("td.reason").first.inner_text()
        assert HOSTILE_LINES[1] in reason and "<U+202E>" in reason
        watch.clean()

        # The detector works: the CSP refuses an inline script, and the console says so.
        with pytest.raises(PlaywrightError, match=r"Content Security Policy|CSP"):
            await page.add_script_tag(content="window.__pwned = 'inline'")
        assert await page.evaluate("window.__pwned === undefined")
        assert any("Content Security Policy" in e for e in watch.errors), watch.errors


async def test_forged_stale_and_foreign_requests_open_and_decide_nothing(
    tmp_path: Path,
    chromium: Path,
    upstream: Upstream,
    upstream_ca_file: Path,
    plain_upstream: Upstream,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_toml(upstream, upstream_ca_file))
    watch = Watch()
    async with (
        http_server(tmp_path, "--policy", str(policy)) as server,
        client(server, "acme", "auto") as agent,
        browser(chromium) as chrome,
    ):
        context, page = await watched(chrome, watch)
        approval, _ = await ask(agent)
        # A tenant's API key opens nothing: not in the form, not as a bearer token.
        await page.goto(f"{server.base}/console")
        await page.locator('input[type="password"][name="token"]').fill(server.keys["acme"])
        await page.get_by_role("button", name="Sign in").click()
        await page.get_by_text("That is not this server's operator token").wait_for()
        await shot(page, "sign-in")
        keyed = await page.request.get(
            f"{server.base}/console/approvals",
            headers={"Authorization": f"Bearer {server.keys['acme']}"},
            max_redirects=0,
        )
        assert keyed.status == 303 and keyed.headers["location"] == "/console/sign-in"

        await sign_in(page, server.base, operator_token(server.data_dir))
        await page.goto(f"{server.base}/console/approvals")
        csrf = await page.locator('input[name="csrf"]').first.get_attribute("value")
        assert csrf

        # A page of another origin posts the console's own form, CSRF token and all.
        attacker = await context.new_page()
        watch.page_of(attacker)
        plain_upstream.pages["/attack"] = (
            "text/html; charset=utf-8",
            (
                f'<form method="post" action="{server.base}/console/approvals/{approval}'
                f'/approve"><input type="hidden" name="csrf" value="{csrf}">'
                "<button>Win a prize</button></form>"
            ).encode(),
            (),
        )
        await attacker.goto(f"http://127.0.0.1:{plain_upstream.port}/attack")
        async with attacker.expect_response(re.compile("/approve$")) as answered:
            await attacker.get_by_role("button", name="Win a prize").click()
        forged = await answered.value
        assert forged.status == 403 and "Origin" in await forged.text()
        await attacker.close()

        # A console page's form without its CSRF field.
        await page.locator(f"#approval-{approval} input[name=csrf]").first.evaluate(
            "(i) => i.remove()"
        )
        await row(page, approval).get_by_role("button", name="Approve").click()
        await page.get_by_text("CSRF token is missing").wait_for()
        assert page.url.endswith(f"/approvals/{approval}/approve")
        await shot(page, "refused")
        done = await airlock_async("approvals", "list", "--data-dir", str(server.data_dir))
        assert f"{approval}  pending" in done.stdout, done.stdout

        # A tampered cookie, and one kept after signing out, open nothing.
        (cookie,) = await context.cookies()
        await page.goto(f"{server.base}/console/")
        await page.get_by_role("button", name="Sign out").click()
        await page.wait_for_url(f"{server.base}/console/sign-in")
        for value in (cookie["value"], cookie["value"][:-2] + "xx"):
            await give_back(context, cookie, value)
            await page.goto(f"{server.base}/console/approvals")
            assert page.url == f"{server.base}/console/sign-in"
        # What Chromium logs of the refusals this test asked for, and nothing else.
        refusals = re.compile(r"Failed to load resource: .* status of 40[13] ")
        watch.errors = [e for e in watch.errors if not refusals.search(e)]
    watch.clean()


async def test_an_expired_sign_in_is_refused_by_the_server(tmp_path: Path, chromium: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[pool]\nsize = 0\n[console]\nsession_s = 2\n")
    watch = Watch()
    async with (
        http_server(tmp_path, "--policy", str(policy)) as server,
        browser(chromium) as chrome,
    ):
        context, page = await watched(chrome, watch)
        await sign_in(page, server.base, operator_token(server.data_dir))
        (cookie,) = await context.cookies()
        expires = int(cookie["value"].split(".")[2])
        assert expires - time.time() <= 2
        # Past its expiry (a deadline of the clock: nothing to wait on but time), the browser
        # drops it; given back without one, the server refuses it by the expiry it signed.
        await anyio.sleep(expires - time.time() + 0.1)
        await give_back(context, cookie, cookie["value"])
        assert [c["value"] for c in await context.cookies()] == [cookie["value"]]
        await page.goto(f"{server.base}/console/approvals")
        assert page.url == f"{server.base}/console/sign-in"
    watch.clean()


async def test_a_stdio_server_serves_the_console_on_console_listen(
    tmp_path: Path, chromium: Path
) -> None:
    data_dir, policy, log = tmp_path / "data", tmp_path / "policy.toml", tmp_path / "stderr"
    policy.write_text(NO_POOL_TOML)
    address = f"127.0.0.1:{free_port()}"
    args = ["serve", "--data-dir", str(data_dir), "--policy", str(policy)]
    params = StdioServerParameters(
        command=AIRLOCK, args=[*args, "--console-listen", address], env=without_airlock_settings()
    )
    watch = Watch()
    with log.open("w") as errlog:
        async with (
            Client(stdio_client(params, errlog=errlog)) as agent,
            browser(chromium) as chrome,
        ):
            # The console is bound before the server answers its first call.
            listed = structured(await call(agent, "list_workspace", {}))
            _, page = await watched(chrome, watch)
            await sign_in(page, f"http://{address}", operator_token(data_dir))
            await menu(page).get_by_role("link", name="Sessions and runs").click()
            await page.get_by_role("link", name=listed["session_id"]).wait_for()
            await shot(page, "sessions")
    assert "serving the operator console on" in log.read_text()
    watch.clean()

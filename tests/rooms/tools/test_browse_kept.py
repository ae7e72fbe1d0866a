"""Kept browsers end to end: real Chromium in the real browser image, under runc and runsc,
against a real local HTTPS server (`trustme`). A browser opened with keep=true goes on over
later calls on the same page, and only for its own session; it ends with close=true, its
session's end and its idle limit; every call is a run of its own whose requests meet the
session's grants as they are at that moment.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from support import airlock, text_of
from test_browse import browse_policy, call, grant, run_records, serve, site_server
from test_browse_refs import ref_of
from test_browse_secrets import API, api_policy, vault_holds_the_secret
from upstream import Upstream

from airlock.sandbox.docker.labels import LABEL_KEPT, LABEL_SESSION
from airlock.store import PROXY_CHALLENGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.usefixtures("browser_image")]
__all__ = ["site_server", "vault_holds_the_secret"]

LOGIN = """<title>sign in</title><h1>Sign in</h1>
<form action="/login" method="get">
<label>User <input name="user"></label>
<label>Password <input name="word" type="password"></label>
<button type="submit">Sign in</button>
</form>"""
# The site's answer to the form: its session cookie, then its home page.
SIGNED = "<title>signing in</title><script>location.replace('/home')</script>"
HOME = """<title>home</title><p id="who"></p><script>
document.getElementById('who').textContent = document.cookie.includes('sid=')
  ? 'signed in with ' + document.cookie : 'not signed in';</script>"""
COOKIE = "sid=s3cr3t-session"
STOPPED_WITHIN_S = 5.0


def login_site(upstream: Upstream) -> str:
    url = serve(upstream, "/form", LOGIN)
    upstream.pages["/login"] = (
        "text/html; charset=utf-8",
        SIGNED.encode(),
        (("Set-Cookie", f"{COOKIE}; Path=/; Secure; SameSite=Lax"),),
    )
    serve(upstream, "/home", HOME)
    return url


def data_of(result: CallToolResult) -> dict[str, Any]:
    data: dict[str, Any] | None = result.structured_content
    assert data is not None and not result.is_error, text_of(result)
    return data


def cookies_sent(upstream: Upstream, path: str) -> list[str]:
    """The Cookie headers of every request for `path` (an empty string for none)."""
    return [
        ";".join(seen.all("Cookie")) for seen in upstream.seen if seen.path.split("?")[0] == path
    ]


def session_boxes(client: docker.DockerClient, session_id: str) -> list[str]:
    found = client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    )
    return [c.short_id for c in found]


async def open_kept(c: Client, url: str, **args: Any) -> dict[str, Any]:
    cap = await grant(c)
    data = data_of(
        await call(
            c,
            "browse",
            {"url": url, "capabilities": [cap], "keep": True, "screenshot": False} | args,
        )
    )
    assert data["status"] == "ok" and data["browser_id"], data
    assert data["browser_open"]
    data["capability_id"] = cap
    return data


async def test_a_login_in_three_calls_ends_signed_in_and_the_browser_is_only_its_sessions(
    site_server: MCPServer, upstream: Upstream, docker_client: docker.DockerClient
) -> None:
    url = login_site(upstream)
    async with Client(site_server) as c:
        opened = await open_kept(c, url)
        browser_id = opened["browser_id"]
        assert f"Kept browser {browser_id} stays open" in text_of(
            await call(c, "browse", {"browser_id": browser_id, "screenshot": False})
        )
        tree = opened["snapshot"]
        user, word = ref_of(tree, '- textbox "User"'), ref_of(tree, '- textbox "Password"')
        typed = data_of(
            await call(
                c,
                "browse",
                {
                    "browser_id": browser_id,
                    "screenshot": False,
                    "actions": [
                        {"kind": "type", "ref": user, "text": "alice"},
                        {"kind": "type", "ref": word, "text": "hunter2"},
                    ],
                },
            )
        )
        assert typed["actions_done"] == 2 and typed["title"] == "sign in", typed["error"]
        assert typed["run_id"] != opened["run_id"]
        # The page stayed: no second load of the form.
        assert upstream.paths().count("/form") == 1
        submit = ref_of(typed["snapshot"], '- button "Sign in"')
        started = time.monotonic()
        signed = data_of(
            await call(
                c,
                "browse",
                {"browser_id": browser_id, "actions": [{"kind": "click", "ref": submit}]},
            )
        )
        step_s = time.monotonic() - started
        assert signed["title"] == "home", (signed["error"], signed["egress"])
        assert f"signed in with {COOKIE}" in signed["text"]
        assert any("/home" in e["path"] for e in signed["egress"]), signed["egress"]
        assert COOKIE in cookies_sent(upstream, "/home")
        assert "/login?user=alice&word=hunter2" in upstream.paths()
        session_a = signed["session_id"]
        # Another session: a browser of its own, with no cookie, and no way into A's.
        async with Client(site_server) as other:
            cap = await grant(other)
            fresh = data_of(
                await call(
                    other,
                    "browse",
                    {"url": url.replace("/form", "/home"), "capabilities": [cap]},
                )
            )
            assert "not signed in" in fresh["text"], fresh["text"]
            assert cookies_sent(upstream, "/home")[-1] == ""
            foreign = await call(
                other,
                "browse",
                {"browser_id": browser_id, "actions": [{"kind": "click", "ref": submit}]},
            )
            assert foreign.is_error
            assert "is not a browser this session keeps open" in text_of(foreign)
        [box] = docker_client.containers.list(
            filters={"label": f"{LABEL_SESSION}={session_a}"}, ignore_removed=True
        )
        assert box.labels[LABEL_KEPT] == "1"
        closed = await call(c, "browse", {"browser_id": browser_id, "close": True})
        assert data_of(closed)["closed"]
        again = await call(c, "browse", {"browser_id": browser_id})
        assert again.is_error and "is not a browser this session keeps open" in text_of(again)
    # Once open, a step is a fraction of a second here (the notes have the numbers); five
    # leaves room for a loaded machine, and none for a browser started afresh each call.
    assert step_s < STOPPED_WITHIN_S, step_s


async def test_each_later_step_presents_its_own_token_without_meeting_a_407(
    site_server: MCPServer, upstream: Upstream, data_dir: Path
) -> None:
    """Chromium caches the proxy credentials it answered the first step's challenge with
    and presents them first on every later connection: each step's token must be that
    value, bound to the step's run, or every step meets a 407 before its first request."""
    url = serve(upstream, "/page", "<title>page</title><a href='/next'>next</a>")
    serve(upstream, "/next", "<title>next</title><img src='/dot.png'><p>the next page</p>")
    upstream.pages["/dot.png"] = ("image/png", b"not really a png", ())
    async with Client(site_server) as c:
        opened = await open_kept(c, url)
        browser_id = opened["browser_id"]
        navigated = data_of(
            await call(c, "browse", {"browser_id": browser_id, "url": url[:-5] + "/next"})
        )
        assert navigated["title"] == "next", navigated["error"]
        back = data_of(
            await call(c, "browse", {"browser_id": browser_id, "actions": [{"kind": "back"}]})
        )
        assert back["title"] == "page", back["error"]
        link = ref_of(back["snapshot"], '- link "next"')
        clicked = data_of(
            await call(
                c,
                "browse",
                {"browser_id": browser_id, "actions": [{"kind": "click", "ref": link}]},
            )
        )
        assert clicked["title"] == "next", clicked["error"]
    assert upstream.paths().count("/next") == 2
    for step in (navigated, clicked):
        records = await run_records(data_dir, step["run_id"])
        shown = [(r.method, r.path, r.status, r.decision) for r in records]
        # (Its tunnel still open when the step ends is cut: a CONNECT record of its own.)
        requests = [r for r in records if r.method != "CONNECT"]
        assert requests and all(r.decision == "allow" for r in requests), shown
        assert PROXY_CHALLENGE not in {r.status for r in records}, shown
    # The first step has the one challenge every browser meets, answered with the token.
    first = await run_records(data_dir, opened["run_id"])
    assert any(r.decision == "allow" for r in first), first


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_audit_shows_each_kept_browser_with_its_calls_and_the_tenant_cap_counts_every_server(
    make_server: Any,
    upstream: Upstream,
    upstream_ca_file: Path,
    data_dir: Path,
    database: str,
    request: pytest.FixtureRequest,
) -> None:
    """Two servers on one set of records (one data directory; a fleet's PostgreSQL): one
    keeps the tenant's only browser, so the other refuses to keep a second; the audit then
    shows the browser with both its calls and why it closed, as text and as JSON."""
    store = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    policy = browse_policy(upstream.port, upstream_ca_file)
    policy["browser"] |= {"max_kept_per_tenant": 1}
    first, second = make_server(policy, store=store), make_server(policy, store=store)
    env = {**os.environ, **({"AIRLOCK_STORE_URL": store} if store else {})}
    url = serve(upstream, "/page", "<title>page</title><p>hello</p>")
    async with Client(first) as a, Client(second) as b:
        opened = await open_kept(a, url)
        again = data_of(await call(a, "browse", {"browser_id": opened["browser_id"]}))
        cap = await grant(b)
        over = await call(b, "browse", {"url": url, "keep": True, "capabilities": [cap]})
        assert over.is_error, text_of(over)
        assert "keeps 1 browser(s) across the servers of the fleet" in text_of(over)
        assert "max_kept_per_tenant limit of 1" in text_of(over)
        closed = await call(a, "browse", {"browser_id": opened["browser_id"], "close": True})
        assert data_of(closed)["closed"]
        # Closed, it counts no more: the other server keeps one now.
        kept_b = await open_kept(b, url)
        assert kept_b["browser_id"] != opened["browser_id"]
    text = airlock("audit", "browsers", "--data-dir", str(data_dir), env=env)
    assert text.returncode == 0, text.stderr
    report = text.stdout
    assert opened["browser_id"] in report and kept_b["browser_id"] in report
    assert f"call 1  {opened['run_id']}  ok" in report
    assert f"call 2  {again['run_id']}  ok" in report
    assert "closed by its session (close=true)" in report
    assert "its session ended or left this server" in report
    step = airlock("audit", "run", again["run_id"], "--data-dir", str(data_dir), env=env)
    assert f"call 2 on kept browser {opened['browser_id']}" in step.stdout, step.stderr
    shown = airlock("audit", "browsers", "--data-dir", str(data_dir), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    by_id = {b["id"]: b for b in json.loads(shown.stdout)}
    browser = by_id[opened["browser_id"]]
    assert browser["session_id"] == opened["session_id"]
    assert [s["run_id"] for s in browser["steps"]] == [opened["run_id"], again["run_id"]]
    assert browser["closed_why"] == "closed by its session (close=true)"
    assert browser["instance_id"] != by_id[kept_b["browser_id"]]["instance_id"]


async def test_end_session_stops_the_kept_browser_within_five_seconds(
    site_server: MCPServer, upstream: Upstream, docker_client: docker.DockerClient
) -> None:
    url = serve(upstream, "/page", "<title>page</title><p>hello</p>")
    async with Client(site_server) as c:
        opened = await open_kept(c, url)
        session_id = opened["session_id"]
        assert len(session_boxes(docker_client, session_id)) == 1
        started = time.monotonic()
        ended = await call(c, "end_session", {"session_id": session_id})
        assert not ended.is_error, text_of(ended)
        while session_boxes(docker_client, session_id):
            assert time.monotonic() - started < STOPPED_WITHIN_S, (
                "the kept box outlived its session"
            )
            await anyio.sleep(0.1)


async def test_a_browser_idle_past_keep_idle_s_is_gone_and_refused(
    make_server: Any,
    upstream: Upstream,
    upstream_ca_file: Path,
    docker_client: docker.DockerClient,
) -> None:
    policy = browse_policy(upstream.port, upstream_ca_file)
    policy["browser"] |= {"keep_idle_s": 2}
    server = make_server(policy)
    url = serve(upstream, "/page", "<title>page</title><p>hello</p>")
    async with Client(server) as c:
        opened = await open_kept(c, url)
        session_id = opened["session_id"]
        started = time.monotonic()
        # The server's sweep closes it with no call to prompt it.
        while session_boxes(docker_client, session_id):
            assert time.monotonic() - started < 2 + STOPPED_WITHIN_S, "idle browser kept"
            await anyio.sleep(0.2)
        late = await call(c, "browse", {"browser_id": opened["browser_id"]})
        assert late.is_error and "idle past [browser] keep_idle_s" in text_of(late)


async def test_the_cap_names_itself_and_a_revoke_between_steps_denies_the_next_request(
    make_server: Any, upstream: Upstream, upstream_ca_file: Path
) -> None:
    policy = browse_policy(upstream.port, upstream_ca_file)
    policy["browser"] |= {"max_kept": 1}
    server = make_server(policy)
    url = serve(upstream, "/page", "<title>page</title><a href='/next'>next</a>")
    serve(upstream, "/next", "<title>next</title><p>the next page</p>")
    async with Client(server) as c:
        opened = await open_kept(c, url)
        over = await call(c, "browse", {"url": url, "keep": True})
        assert over.is_error, text_of(over)
        assert "[browser] max_kept limit of 1" in text_of(over)
        assert "close=true" in text_of(over)
        revoked = await call(c, "revoke_capability", {"capability_id": opened["capability_id"]})
        assert not revoked.is_error, text_of(revoked)
        link = ref_of(opened["snapshot"], '- link "next"')
        denied = data_of(
            await call(
                c,
                "browse",
                {"browser_id": opened["browser_id"], "actions": [{"kind": "click", "ref": link}]},
            )
        )
        # The tunnel for /next is refused: the session no longer holds the grant.
        assert denied["egress"], denied
        assert all(e["decision"] == "deny" for e in denied["egress"]), denied["egress"]
        assert "the page did not load" in (denied["error"] or ""), denied["error"]
        assert "/next" not in upstream.paths()
        # A capability granted after the browser opened applies from its next request on.
        again = await grant(c)
        allowed = data_of(
            await call(
                c,
                "browse",
                {
                    "browser_id": opened["browser_id"],
                    "url": f"{url[:-5]}/next",
                    "capabilities": [again],
                },
            )
        )
        assert allowed["title"] == "next" and allowed["browser_open"], allowed["error"]
        assert "/next" in upstream.paths()


@pytest.mark.usefixtures("vault_holds_the_secret")
async def test_a_kept_browser_is_never_given_a_capability_with_a_secret(
    make_server: Any, upstream: Upstream, upstream_ca_file: Path
) -> None:
    server = make_server(api_policy(upstream.port, upstream_ca_file))
    url = serve(upstream, "/page", "<title>page</title><p>hello</p>")
    async with Client(server) as c:
        opened = await open_kept(c, url)
        asked = await call(c, "request_capability", {"capability": API, "reason": "test"})
        assert asked.structured_content is not None, text_of(asked)
        api = asked.structured_content["capability_id"]
        refused = await call(
            c, "browse", {"browser_id": opened["browser_id"], "capabilities": [api]}
        )
        assert refused.is_error and "carries a secret" in text_of(refused), text_of(refused)
        # The browser itself is untouched by the refusal.
        still = data_of(await call(c, "browse", {"browser_id": opened["browser_id"]}))
        assert still["title"] == "page" and still["browser_open"]


async def test_a_stale_ref_of_an_earlier_page_fails_clearly_on_the_kept_browser(
    site_server: MCPServer, upstream: Upstream
) -> None:
    url = serve(upstream, "/page", "<title>page</title><button>Press</button>")
    other = serve(upstream, "/other", "<title>other</title><p>no button here</p>")
    async with Client(site_server) as c:
        opened = await open_kept(c, url)
        press = ref_of(opened["snapshot"], '- button "Press"')
        moved = data_of(
            await call(
                c,
                "browse",
                {
                    "browser_id": opened["browser_id"],
                    "url": other,
                    "actions": [{"kind": "click", "ref": press}],
                },
            )
        )
        assert moved["title"] == "other" and moved["actions_done"] == 0
        assert re.search(rf"ref {press} is stale", moved["error"] or ""), moved["error"]
        assert moved["browser_open"]


# The click leads on by script a moment later, and the page's own script then holds its
# renderer before it lets go, so the next page's document request comes long after the
# click returned: a driver that reads as soon as no new document began reads the page left.
SLOW_LEAVE = """<title>slow to leave</title><h1>Leaving is slow</h1>
<a href="/arrived" id="on">go on</a><script>
document.getElementById('on').addEventListener('click', (event) => {
  event.preventDefault(); setTimeout(() => { location.href = '/arrived'; }, 50); });
window.addEventListener('beforeunload', () => {
  const until = Date.now() + 1500; while (Date.now() < until) {} });</script>"""
ARRIVED = "<title>arrived</title><h1>Arrived</h1>"


async def test_a_click_whose_navigation_starts_late_reads_the_page_it_leads_to(
    site_server: MCPServer, upstream: Upstream
) -> None:
    url = serve(upstream, "/slow", SLOW_LEAVE)
    serve(upstream, "/arrived", ARRIVED)
    async with Client(site_server) as c:
        opened = await open_kept(c, url)
        link = ref_of(opened["snapshot"], '- link "go on"')
        step = {"browser_id": opened["browser_id"], "screenshot": False}
        clicked = data_of(
            await call(c, "browse", step | {"actions": [{"kind": "click", "ref": link}]})
        )
        assert clicked["error"] is None and clicked["title"] == "arrived", clicked
        assert 'heading "Arrived"' in clicked["snapshot"] and clicked["browser_open"]

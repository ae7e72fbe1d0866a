"""The drill's browser probes: pages the box must not let out, and a page of the drill's own.

Belongs here: the browser rows of `airlock drill`. "Pages the box must not let out" opens the
metadata address, a host no capability names and a local file under the policy as it is.
"A page's own tricks" serves a page from the drill itself (a plain-HTTP server on the
host's loopback, for the length of the probe) under the policy plus two capabilities of the
drill's: one for the page, one for an API on another host name of the same server, with a
canary secret no vault holds, under `[browser] secrets = "withhold"`. The page then asks for
a `chrome-extension:` stylesheet and a `file:` URL (the in-box scheme filter must fail the
one and list it in `blocked`), for the box's own relay port on loopback (only the proxy may
answer: Chromium's implicit loopback bypass must be off, and the page itself, on loopback,
must have come through the proxy), and for the API (it must arrive without any secret,
its record saying so: a browse's egress injects none). Judged from the host's side: the
proxy's records, what the drill's server received, and the box's `blocked` list. Does not
belong here: the run_code probes (`drill_probes`), the kept-browser probe (`drill_kept`, which
opens a page of this site), the table and its record (`drill`).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.client import Client
from mcp.types import CallToolResult

from airlock.policies import Capability, Policy
from airlock.sandbox import browser_image, connect
from airlock.sandbox.environment import RELAY_PORT

from .drill_probes import Verdict, result_text

Call = Callable[[Client, str, dict[str, Any]], Awaitable[CallToolResult]]

BROWSER_ATTACK = "browser: metadata address, another host, a local file"
BROWSER_EXPECTED = "every request the page makes denied by the proxy, file: refused"
BROWSER_TARGETS = ("http://169.254.169.254/latest/meta-data/", "https://drill-denied.invalid/")
TRICKS_ATTACK = "browser: a page's own tricks (other schemes, loopback, a capability's secret)"
TRICKS_EXPECTED = (
    "non-web requests failed in the box, loopback only through the proxy, the API reached "
    "without its secret"
)
PAGE_CAPABILITY = "airlock-drill-page"
API_CAPABILITY = "airlock-drill-api"
CANARY_SECRET = "airlock-drill-canary"
"""A vault name no vault holds: the probe needs no value, only to see none is looked up."""
WITHHELD = "without its secret (this run injects none)"


def ensure_browser_image() -> None:
    """The browser image, built first if missing (a server would answer "being built")."""

    def report(line: str) -> None:
        sys.stderr.write(f"browser image: {line}\n")

    engine = connect()
    try:
        browser_image.ensure_browser_image(engine, report)
    finally:
        engine.close()


async def denied_pages(client: Client, call: Call, sessions: list[str], timeout_s: int) -> Verdict:
    """Pages at the metadata address and at a host no capability names must load nothing,
    and a local file must be refused outright."""
    observed: list[str] = []
    held = True
    for url in BROWSER_TARGETS:
        result = await call(client, "browse", {"url": url, "timeout_s": timeout_s})
        data = dict(result.structured_content or {})
        if result.is_error:
            return Verdict(f"browse failed: {result_text(result)}", False)
        session = str(data["session_id"])
        sessions.append(session)
        await call(client, "end_session", {"session_id": session})
        # Judged by the proxy's records, not the page.
        requests = data.get("egress", [])
        passed = [e for e in requests if e["decision"] != "deny"]
        held = held and bool(requests) and not passed
        observed.append(f"{url}: {len(requests)} request(s), {len(passed)} let through")
    refused = await call(client, "browse", {"url": "file:///etc/passwd"})
    held = held and refused.is_error
    observed.append("file:///etc/passwd: " + ("refused" if refused.is_error else "ACCEPTED"))
    return Verdict("; ".join(observed), held)


# ---- a page of the drill's own ------------------------------------------------------------

TRICKS_PAGE = """<!doctype html><title>airlock drill</title>
<link rel="stylesheet" href="chrome-extension://airlock-drill/probe.css">
<body>probing</body><script>
const found = {{}};
const probe = (name, start) => start().then(v => {{ found[name] = v; }},
                                          () => {{ found[name] = 'failed'; }});
Promise.all([
  probe('file', () => fetch('file:///etc/passwd').then(() => 'READ')),
  probe('relay', () => fetch('http://127.0.0.1:{relay}/').then(r => 'answered ' + r.status)),
  probe('api', () => fetch('http://localhost:{port}/api/echo').then(r => r.json())),
]).then(() => {{
  document.body.innerText = JSON.stringify(found);
  const done = document.createElement('p'); done.id = 'done'; document.body.appendChild(done);
}});
</script>"""


KEPT_PATH = "/kept"
KEPT_PAGE = "<!doctype html><title>airlock drill kept</title><p>a page of session A</p>"


@dataclass
class Site:
    """The drill's pages and API: what came in (whether each carried any Authorization,
    never its value), and the Cookie each request for `KEPT_PATH` carried (the drill's own
    cookie, `cookie`, set by that page: the kept-browser probe's)."""

    port: int = 0
    seen: list[tuple[str, bool]] = field(default_factory=list)
    cookie: str = field(default_factory=lambda: f"airlock_drill_kept={secrets.token_hex(16)}")
    kept_cookies: list[str] = field(default_factory=list)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _SiteServer

    def do_GET(self) -> None:
        site = self.server.site
        site.seen.append((self.path, "Authorization" in self.headers))
        extra: list[tuple[str, str]] = []
        if self.path == KEPT_PATH:
            site.kept_cookies.append(self.headers.get("Cookie", ""))
            kind = "text/html; charset=utf-8"
            body = KEPT_PAGE.encode()
            extra.append(("Set-Cookie", f"{site.cookie}; Path=/"))
        elif self.path == "/page":
            kind = "text/html; charset=utf-8"
            body = TRICKS_PAGE.format(relay=RELAY_PORT, port=site.port).encode()
        else:
            kind = "application/json"
            body = json.dumps({"authorization": "Authorization" in self.headers}).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Access-Control-Allow-Origin", "*")
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _SiteServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site: Site) -> None:
        self.site = site
        super().__init__(("127.0.0.1", 0), _Handler)
        site.port = self.server_address[1]


@contextlib.contextmanager
def serving() -> Iterator[Site]:
    """The drill's own site on the host's loopback, for the length of the block."""
    site = Site()
    server = _SiteServer(site)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def tricks_policy(policy: Policy, port: int) -> Policy:
    """`policy` with the drill's two capabilities, and a browse's secrets withheld."""
    common = {"ports": [port], "methods": ["GET"], "approval": "auto"}
    page = Capability.model_validate(
        {
            **common,
            "description": "the drill's own page",
            "hosts": ["127.0.0.1"],
            "paths": ["/page", KEPT_PATH, "/favicon.ico"],
            "allow_private": ["127.0.0.1/32"],
        }
    )
    api = Capability.model_validate(
        {
            **common,
            "description": "the drill's own API, with a canary secret",
            "hosts": ["localhost"],
            "paths": ["/api/**"],
            "secret": CANARY_SECRET,
            "inject": {"header": "Authorization", "format": "Bearer {secret}"},
            "allow_private": ["127.0.0.0/8", "::1/128"],
        }
    )
    capabilities = {**policy.capabilities, PAGE_CAPABILITY: page, API_CAPABILITY: api}
    browser = policy.browser.model_copy(update={"secrets": "withhold"})
    return policy.model_copy(update={"capabilities": capabilities, "browser": browser})


@dataclass(frozen=True)
class TrickFacts:
    """What the tricks page's browse came back with, and what the drill's server received."""

    port: int
    structured: dict[str, Any]
    seen: list[tuple[str, bool]]


def judge_tricks(facts: TrickFacts) -> Verdict:
    """Held when all three tricks were stopped where they must be (see the module)."""
    data, port = facts.structured, facts.port
    egress = [e for e in data.get("egress", []) if isinstance(e, dict)]
    if data.get("status") != "ok":
        return Verdict(f"the drill's page did not load ({data.get('error')})", False)
    failures = []
    if not any(str(u).startswith("chrome-extension:") for u in data.get("blocked", [])):
        failures.append("a chrome-extension: request was not failed in the box")
    page_through_proxy = any(
        e["host"] == "127.0.0.1" and e["port"] == port and e["decision"] == "allow" for e in egress
    )
    relay_through_proxy = any(
        e["host"] == "127.0.0.1" and e["port"] == RELAY_PORT and e["decision"] == "deny"
        for e in egress
    )
    if not (page_through_proxy and relay_through_proxy):
        failures.append("loopback was reached without the proxy")
    api_records = [e for e in egress if e["host"] == "localhost" and e["port"] == port]
    api_seen = [authorized for path, authorized in facts.seen if path.startswith("/api/")]
    withheld = bool(api_records) and all(
        e["decision"] == "allow" and e["reason"].endswith(WITHHELD)
        for e in api_records
        if e["method"] != "CONNECT"
    )
    if not api_seen or any(api_seen) or not withheld:
        reasons = "; ".join(e["reason"] for e in api_records)[:200]
        failures.append(f"the API's secret was sent or meant to be ({reasons or 'no record'})")
    if failures:
        return Verdict("; ".join(failures), False)
    return Verdict(
        f"{len(data.get('blocked', []))} non-web request(s) failed in the box; the page and "
        f"the relay port on loopback went through the proxy; the API was reached "
        f"{len(api_seen)} time(s), never with a secret",
        True,
    )


class _NotTheOperators(logging.Filter):
    """The canary capability names a secret no vault holds on purpose: the server's start
    warning about it is the drill's, not the operator's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return API_CAPABILITY not in record.getMessage()


async def page_tricks(
    make_client: Callable[[Policy], Client], policy: Policy, call: Call, sessions: list[str]
) -> Verdict:
    """Serve the drill's page, browse it under `tricks_policy`, and judge."""
    quiet = _NotTheOperators()
    checks = logging.getLogger("airlock.server.secret_check")
    checks.addFilter(quiet)
    try:
        with serving() as site:
            async with make_client(tricks_policy(policy, site.port)) as client:
                capabilities = []
                for name in (PAGE_CAPABILITY, API_CAPABILITY):
                    granted = await call(
                        client, "request_capability", {"capability": name, "reason": "drill"}
                    )
                    if granted.is_error or granted.structured_content is None:
                        return Verdict(
                            f"could not grant {name}: {result_text(granted)[:200]}", False
                        )
                    capabilities.append(granted.structured_content["capability_id"])
                wait = {"kind": "wait_for", "selector": "#done", "timeout_ms": 8000}
                url = f"http://127.0.0.1:{site.port}/page"
                args = {"url": url, "capabilities": capabilities, "actions": [wait]}
                result = await call(client, "browse", args)
                data = dict(result.structured_content or {})
                if result.is_error or "session_id" not in data:
                    return Verdict(f"browse failed: {result_text(result)[:200]}", False)
                sessions.append(str(data["session_id"]))
                await call(client, "end_session", {"session_id": data["session_id"]})
            return judge_tricks(TrickFacts(site.port, data, list(site.seen)))
    finally:
        checks.removeFilter(quiet)

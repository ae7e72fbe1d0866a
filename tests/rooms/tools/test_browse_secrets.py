"""A browser box never carries a secret: attacked with real Chromium in the real browser image
and a real local HTTPS API (a `trustme` certificate) whose capability has a vault secret.

The page is on one granted host (localhost) and attacks the API on another (127.0.0.1, the
same server): a no-cors fetch POST, an image, an auto-submitted form, and a read of a
gzip-compressed echo served with CORS `*`. None may arrive with the secret, and the page
may never read it back. With the policy's default the capability is refused outright.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import text_of
from test_browse import LOOPBACK, browse_policy, call, grant, run_records, serve
from upstream import Upstream

from airlock.broker import Vault, load_key, vault_path

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.usefixtures("browser_image")]

SECRET_NAME = "api_token"
SECRET = "sk-browse-" + secrets.token_urlsafe(24)
API = "api"

ATTACK = """<title>ads</title><body>an ordinary page</body>
<iframe name="sink" style="display:none"></iframe>
<form id="f" method="POST" action="{api}/api/form" target="sink">
<input name="q" value="1"></form>
<script>
const found = {{}};
const img = new Promise(done => {{
  const i = new Image(); i.onload = i.onerror = () => done(); i.src = '{api}/api/img';
  document.body.appendChild(i); }});
document.getElementById('f').submit();
Promise.all([
  img,
  fetch('{api}/api/fetch', {{method: 'POST', mode: 'no-cors', body: 'x'}}).catch(() => null),
  fetch('{api}/api/gzecho').then(r => r.text()).then(t => {{ found.echo = t; }},
                                                     e => {{ found.echo = 'failed ' + e; }}),
]).then(() => new Promise(done => setTimeout(done, 500))).then(() => {{
  document.body.innerText = JSON.stringify(found);
  const p = document.createElement('p'); p.id = 'done'; document.body.appendChild(p);
}});
</script>"""


def api_policy(port: int, ca_file: Path, **browser: Any) -> dict[str, Any]:
    policy = browse_policy(port, ca_file)
    policy["capabilities"][API] = {
        "description": "an API with a token",
        "hosts": ["127.0.0.1"],
        "ports": [port],
        "methods": ["GET", "POST"],
        "paths": ["/api/**"],
        "secret": SECRET_NAME,
        "inject": {"header": "Authorization", "format": "Bearer {secret}"},
        "approval": "auto",
        "allow_private": LOOPBACK,
    }
    policy["browser"] |= browser
    return policy


@pytest.fixture
def vault_holds_the_secret(data_dir: Path) -> None:
    Vault(vault_path(data_dir), load_key(data_dir, {})).set(
        SECRET_NAME, SECRET, ["127.0.0.1", "localhost"]
    )


@pytest.mark.usefixtures("vault_holds_the_secret")
async def test_a_page_firing_fetch_image_form_and_a_gzip_read_at_the_api_never_carries_the_secret(
    make_server: Callable[..., MCPServer],
    upstream: Upstream,
    upstream_ca_file: Path,
    data_dir: Path,
) -> None:
    server = make_server(api_policy(upstream.port, upstream_ca_file, secrets="withhold"))
    url = serve(upstream, "/ads", ATTACK.format(api=f"https://127.0.0.1:{upstream.port}"))
    wait = {"kind": "wait_for", "selector": "#done", "timeout_ms": 8000}
    async with Client(server) as c:
        site = await grant(c)
        api = await call(c, "request_capability", {"capability": API, "reason": "test"})
        assert api.structured_content is not None, text_of(api)
        args = {"url": url, "capabilities": [site, api.structured_content["capability_id"]]}
        result = await call(c, "browse", {**args, "actions": [wait]})
    data = result.structured_content
    assert data is not None and data["status"] == "ok", text_of(result)
    assert data["actions_done"] == 1, data["error"]
    # Every attack arrived at the API (so each was tried), and none with the secret.
    arrived = {s.path: s for s in upstream.seen if s.path.startswith("/api/")}
    assert {"/api/form", "/api/img", "/api/fetch", "/api/gzecho"} <= set(arrived)
    assert arrived["/api/form"].method == arrived["/api/fetch"].method == "POST"
    assert all(s.all("Authorization") == [] for s in arrived.values()), arrived
    assert SECRET not in json.dumps([s.headers for s in upstream.seen])
    # The page read the compressed echo (CORS *), and it holds no secret either.
    echo = json.loads(json.loads(data["text"])["echo"])["headers"]
    echoed = {k.lower(): v for k, v in echo.items()}
    assert echoed["host"] == f"127.0.0.1:{upstream.port}" and "authorization" not in echoed
    assert SECRET not in result.model_dump_json()
    # The operator's records: the API's requests allowed without the secret, none injected.
    records = await run_records(data_dir, data["run_id"])
    api_requests = [r for r in records if r.host == "127.0.0.1" and r.method != "CONNECT"]
    assert {r.path for r in api_requests} >= {"/api/form", "/api/img", "/api/fetch"}
    assert all(
        r.reason.endswith("without its secret (this run injects none)") for r in api_requests
    )
    assert not [r for r in records if r.injected or "injected" in r.reason]


@pytest.mark.usefixtures("vault_holds_the_secret")
async def test_by_default_a_capability_with_a_secret_is_refused_before_any_box_starts(
    make_server: Callable[..., MCPServer], upstream: Upstream, upstream_ca_file: Path
) -> None:
    server = make_server(api_policy(upstream.port, upstream_ca_file))
    url = serve(upstream, "/ads", ATTACK.format(api=f"https://127.0.0.1:{upstream.port}"))
    async with Client(server) as c:
        api = await call(c, "request_capability", {"capability": API, "reason": "test"})
        assert api.structured_content is not None, text_of(api)
        args = {"url": url, "capabilities": [api.structured_content["capability_id"]]}
        result = await call(c, "browse", args)
    assert result.is_error
    text = text_of(result)
    assert "capability 'api' carries a secret, and a browser box never does" in text
    assert '[browser] secrets = "withhold"' in text and ". " not in text.rstrip(".")
    assert upstream.seen == []

"""What a web page can do to a loopback `airlock serve --http`: nothing.

A page the operator's browser opens can reach 127.0.0.1 two ways: by DNS rebinding (its
own name resolving to 127.0.0.1, so the request carries `Host: <its name>`) or by a
cross-site request (its own `Origin`, or a form post). Every route refuses both, and
/approvals and /metrics answer only the operator token of the data directory (or a
bearer key), even on loopback without `--auth`. The server is a real subprocess; no
sandbox runs (a capability request never touches the engine).
"""

from __future__ import annotations

import re
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from support import NO_POOL_TOML, airlock_async, ask, serving_http, text_of

from airlock.errors import InvalidRequest
from airlock.server.auth import generate_api_key
from airlock.server.bearer import operator_token

pytestmark = pytest.mark.anyio

CAP = "ask-api"
POLICY_TOML = (
    NO_POOL_TOML
    + """
[capabilities.ask-api]
description = "an API a human must approve"
params = { org = "^[a-z]{1,10}$" }
hosts = ["api.example.com"]
methods = ["GET"]
paths = ["/orgs/{org}/**"]
approval = "ask"
"""
)
REBOUND = "rebind.attacker.test"
APPROVAL_ID = re.compile(r'approval_id="(apr_[a-z0-9]+)"')
SESSION_ID = re.compile(r'session_id="(ses_[a-z0-9]+)"')


@dataclass(frozen=True)
class Local:
    base: str
    port: int
    data_dir: Path
    log: Path

    def operator(self) -> dict[str, str]:
        token = (self.data_dir / "operator-token").read_text().strip()
        return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def loopback_server(tmp_path: Path, *extra: str) -> AsyncIterator[Local]:
    """`airlock serve --http` on 127.0.0.1, by default without --auth."""
    (tmp_path / "policy.toml").write_text(POLICY_TOML)
    data_dir = tmp_path / "data"
    log = tmp_path / "server.log"
    args = ["--policy", str(tmp_path / "policy.toml"), "--data-dir", str(data_dir), *extra]
    async with serving_http(*args, log=log) as serving:
        yield Local(serving.base, int(serving.base.rpartition(":")[2]), data_dir, log)


@asynccontextmanager
async def agent(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """An MCP client that cannot elicit, so an `ask` capability waits for the operator."""
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as connected,
    ):
        yield connected


async def pending(c: Client) -> tuple[str, str]:
    """A pending approval's id and its session's."""
    message = text_of(await ask(c, CAP))
    approval, session = APPROVAL_ID.search(message), SESSION_ID.search(message)
    assert approval is not None and session is not None, message
    return approval.group(1), session.group(1)


async def status_of(local: Local, approval: str) -> str:
    async with httpx.AsyncClient(base_url=local.base) as http:
        listed = await http.get("/approvals", headers=local.operator())
    assert listed.status_code == 200, listed.text
    found = {a["id"]: a["status"] for a in listed.json()["approvals"]}
    return str(found.get(approval, "not pending"))


async def test_a_rebinding_page_reaches_no_route_even_holding_the_token(tmp_path: Path) -> None:
    async with loopback_server(tmp_path) as local, agent(f"{local.base}/mcp") as c:
        approval, _ = await pending(c)
        # With the token too, so only the Host check can be what refuses.
        rebound = {"Host": f"{REBOUND}:{local.port}", "Origin": f"http://{REBOUND}:{local.port}"}
        page = {**rebound, **local.operator()}
        async with httpx.AsyncClient(base_url=local.base) as http:
            answers = [
                await http.get("/approvals", headers=page),
                await http.get("/metrics", headers=page),
                await http.get("/healthz", headers=rebound),
                await http.get("/livez", headers=rebound),
                await http.get("/readyz", headers=rebound),
                await http.post(f"/approvals/{approval}/approve", headers=page),
            ]
        assert [a.status_code for a in answers] == [421] * 6
        assert all(approval not in a.text and "airlock_" not in a.text for a in answers)
        assert await status_of(local, approval) == "pending"


async def test_a_cross_site_page_reaches_no_route_even_holding_the_token(tmp_path: Path) -> None:
    async with loopback_server(tmp_path) as local, agent(f"{local.base}/mcp") as c:
        approval, _ = await pending(c)
        page = {"Origin": "https://evil.example", **local.operator()}
        async with httpx.AsyncClient(base_url=local.base) as http:
            answers = [
                await http.get("/approvals", headers=page),
                await http.get("/metrics", headers=page),
                await http.get("/healthz", headers={"Origin": "https://evil.example"}),
                await http.post(f"/approvals/{approval}/deny", headers=page),
                await http.post(f"/approvals/{approval}/deny", headers={"Origin": "null"}),
            ]
        assert [a.status_code for a in answers] == [403] * 5
        assert all(approval not in a.text and "airlock_" not in a.text for a in answers)
        assert await status_of(local, approval) == "pending"


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"],
)
async def test_a_form_post_cannot_decide_and_no_preflight_is_answered(
    tmp_path: Path, content_type: str
) -> None:
    async with loopback_server(tmp_path) as local, agent(f"{local.base}/mcp") as c:
        approval, _ = await pending(c)
        async with httpx.AsyncClient(base_url=local.base) as http:
            # A form a page submits: no Origin (as after some redirects), no token.
            form = await http.post(
                f"/approvals/{approval}/deny",
                content=b"x=1",
                headers={"Content-Type": content_type},
            )
            # The token is refused in a form too: the guard, not only auth, stops it.
            tokened = await http.post(
                f"/approvals/{approval}/deny",
                content=b"x=1",
                headers={"Content-Type": content_type, **local.operator()},
            )
            # A POST no page can send unasked, asked about: never allowed.
            preflight = await http.options(
                f"/approvals/{approval}/approve",
                headers={
                    "Origin": f"http://127.0.0.1:{local.port}",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization",
                },
            )
        assert form.status_code == 415 and tokened.status_code == 415
        assert preflight.status_code == 403
        assert not any(h.startswith("access-control-") for h in preflight.headers)
        assert await status_of(local, approval) == "pending"


async def test_without_the_operator_token_loopback_decides_nothing_and_the_cli_does(
    tmp_path: Path,
) -> None:
    async with loopback_server(tmp_path) as local, agent(f"{local.base}/mcp") as c:
        approval, session = await pending(c)
        json_body = {"Content-Type": "application/json"}
        wrong = {"Authorization": "Bearer alo_" + "x" * 43, **json_body}
        async with httpx.AsyncClient(base_url=local.base) as http:
            refused = [
                await http.get("/approvals"),
                await http.get("/metrics"),
                await http.post(f"/approvals/{approval}/approve", headers=json_body),
                await http.post(f"/approvals/{approval}/approve", headers=wrong),
                # A POST with neither a token nor JSON is a page's simple request.
                await http.post(f"/approvals/{approval}/approve"),
            ]
        assert [r.status_code for r in refused] == [401, 401, 401, 401, 415]
        assert await status_of(local, approval) == "pending"

        # The token: random, the owner's alone.
        token_file = local.data_dir / "operator-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert re.fullmatch(r"alo_[A-Za-z0-9_-]{43}", token_file.read_text().strip())
        assert token_file.read_text().strip() not in local.log.read_text()

        # The operator's CLI decides, from the data directory, and the agent collects.
        done = await airlock_async(
            "approvals", "approve", approval, "--data-dir", str(local.data_dir)
        )
        assert done.returncode == 0, done.stderr
        granted = await ask(c, CAP, approval_id=approval, session_id=session)
        assert not granted.is_error, text_of(granted)
        assert granted.structured_content is not None
        assert granted.structured_content["approved_by"] == "operator"

        # And the operator token decides over HTTP, any tenant's.
        second, _ = await pending(c)
        async with httpx.AsyncClient(base_url=local.base) as http:
            denied = await http.post(f"/approvals/{second}/deny", headers=local.operator())
            metrics = await http.get("/metrics", headers=local.operator())
        assert denied.status_code == 200, denied.text
        assert (
            denied.json()["status"] == "denied" and denied.json()["decided_by"] == "http:operator"
        )
        assert metrics.status_code == 200 and "airlock_live_sessions" in metrics.text


async def test_a_tenants_key_sees_only_its_own_metrics(tmp_path: Path) -> None:
    keys: dict[str, str] = {}
    entries = []
    for tenant in ("acme", "globex"):
        keys[tenant], digest = generate_api_key()
        entries.append(f'[[keys]]\nid = "{tenant}-ci"\ntenant = "{tenant}"\nhash = "{digest}"\n')
    (tmp_path / "auth.toml").write_text("\n".join(entries))
    async with loopback_server(tmp_path, "--auth", str(tmp_path / "auth.toml")) as local:
        acme_key = {"Authorization": f"Bearer {keys['acme']}"}
        async with agent(f"{local.base}/mcp", acme_key) as acme:
            await pending(acme)  # counts acme's capability decision "pending"
        async with httpx.AsyncClient(base_url=local.base) as http:
            globex = await http.get(
                "/metrics", headers={"Authorization": f"Bearer {keys['globex']}"}
            )
            own = await http.get("/metrics", headers=acme_key)
            operator = await http.get("/metrics", headers=local.operator())
    assert globex.status_code == 200
    assert "acme" not in globex.text
    # Nor the server-wide totals, which count every tenant's sessions and containers.
    assert "airlock_live_sessions" not in globex.text
    assert 'airlock_capability_decisions_total{outcome="pending",tenant="acme"} 1.0' in own.text
    assert "globex" not in own.text and "airlock_live_sessions" not in own.text
    assert 'tenant="acme"' in operator.text and "airlock_live_sessions" in operator.text


async def test_a_host_header_with_control_characters_is_logged_escaped(tmp_path: Path) -> None:
    async with loopback_server(tmp_path) as local:
        # httpx refuses to send such a header; a raw stream does what an attacker would.
        with anyio.fail_after(30):
            async with await anyio.connect_tcp("127.0.0.1", local.port) as raw:
                # /mcp: the route the SDK itself guarded (and logged) before the shared guard.
                await raw.send(
                    b"POST /mcp HTTP/1.1\r\nHost: evil\x1b[31mRED\xc2\x9b2J\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 2\r\n"
                    b"Connection: close\r\n\r\n{}"
                )
                answer = await raw.receive()
            # uvicorn's own records reach the same handler (it installs none of its own).
            async with await anyio.connect_tcp("127.0.0.1", local.port) as raw:
                await raw.send(b"GET /\x1b[2J HTTP/1.1\r\n\r\n")
                refused = await raw.receive()
        log = local.log.read_bytes()
    assert answer.startswith(b"HTTP/1.1 421 ") and refused.startswith(b"HTTP/1.1 400 ")
    # The raw ESC and the C1 CSI (U+009B, as uvicorn reads the bytes C2 9B) never get out.
    text = log.decode()
    assert "\x1b" not in text and "\x9b" not in text
    assert "Invalid Host header: evil\\x1b[31mRED\u00c2\\x9b2J" in text
    assert re.search(r"(?m)^\S+Z WARNING uvicorn.error: Invalid HTTP request received", text)


def test_the_operator_token_is_made_once_and_a_loose_or_foreign_file_is_refused(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    token = operator_token(data_dir)
    path = data_dir / "operator-token"
    assert operator_token(data_dir) == token  # the next start reads it back
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    path.chmod(0o644)
    with pytest.raises(InvalidRequest, match=f"run `chmod 600 {re.escape(str(path))}`"):
        operator_token(data_dir)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InvalidRequest, match="not a regular file; remove it"):
        operator_token(data_dir)
    path.unlink()
    path.write_text("guessable\n")
    path.chmod(0o600)
    with pytest.raises(InvalidRequest, match="does not hold a token; remove it and restart") as e:
        operator_token(data_dir)
    assert "guessable" not in str(e.value)

"""Egress end to end: capabilities, the per-run proxy and secret injection, as clients see them.

Driven through the SDK's in-memory client against the real server, real Docker and the
real image. The upstream is a local HTTPS server on 127.0.0.1 with a `trustme` certificate
(shared with test_egress_proxy.py), named explicitly by a test policy; the vault holds a
secret before the server starts. Sandbox code reports one JSON line; the tests check it,
the run's egress records and what the upstream saw.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult
from support import (
    EGRESS_CAP,
    EGRESS_PRELUDE,
    EGRESS_SECRET,
    EGRESS_SECRET_NAME,
    LOOPBACK,
    airlock_async,
    call,
    egress_policy,
    egress_run,
    error_text,
    grant,
    is_tunnel,
    report,
    requests_of,
    text_of,
    wait_until,
    without_airlock_settings,
)
from upstream import Upstream

from airlock.broker import Vault, load_key, vault_path
from airlock.policies import Policy
from airlock.server import Config, build_server

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])
QUERY_VALUE = "qv-" + secrets.token_hex(8)
ASK = "ask-api"
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/sandbox",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONNOUSERSITE": "1",
}
CA_BUNDLE = "/tmp/.airlock/ca-bundle.pem"
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
)


# ---- fixtures and helpers -----------------------------------------------------------------


MakeEgressServer = Callable[..., MCPServer]


@pytest.fixture
def egress_server(
    make_server: Callable[..., MCPServer],
    data_dir: Path,
    upstream: Upstream,
    upstream_ca_file: Path,
) -> MakeEgressServer:
    """Servers whose policy names `upstream`, with the secret in the vault beforehand."""
    Vault(vault_path(data_dir), load_key(data_dir, {})).set(
        EGRESS_SECRET_NAME, EGRESS_SECRET, ["localhost"]
    )

    def make(clock: Callable[[], float] = time.time, **options: Any) -> MCPServer:
        return make_server(egress_policy(upstream.port, upstream_ca_file, **options), clock=clock)

    return make


async def assert_alive(c: Client) -> None:
    result = await call(c, "run_code", {"code": "print('alive')"})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["stdout"]["text"] == "alive\n"


def only(records: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in records if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, records)
    return found[0]


def auth_seen(upstream: Upstream) -> list[list[str]]:
    return [s.all("Authorization") for s in upstream.seen]


# ---- 1. standard clients, zero configuration ----------------------------------------------


@MODES
async def test_urllib_and_curl_reach_the_granted_upstream_with_the_secret_injected(
    egress_server: MakeEgressServer, upstream: Upstream, mode: str
) -> None:
    url = f"https://localhost:{upstream.port}"
    async with Client(egress_server(), mode=mode) as c:
        cap = await grant(c)
        result = await egress_run(
            c,
            f'report(urllib=fetch("{url}/api/urllib?token={QUERY_VALUE}"), '
            f'curl=curl("{url}/api/curl?token={QUERY_VALUE}"))',
            [cap["capability_id"]],
        )
    out = report(result)
    assert out["urllib"]["status"] == 200
    assert json.loads(out["urllib"]["body"])["path"] == f"/api/urllib?token={QUERY_VALUE}"
    assert out["curl"]["exit"] == 0 and out["curl"]["code"] == "200"
    assert sorted(upstream.paths()) == sorted(
        [f"/api/urllib?token={QUERY_VALUE}", f"/api/curl?token={QUERY_VALUE}"]
    )
    assert auth_seen(upstream) == [[f"Bearer {EGRESS_SECRET}"]] * 2
    for seen in upstream.seen:
        assert seen.all("Proxy-Authorization") == []
    assert len(requests_of(result["egress"])) == 2
    tunnels = [r for r in result["egress"] if is_tunnel(r)]
    assert len(tunnels) == 2 and all(t["decision"] == "allow" for t in tunnels)
    for client in ("urllib", "curl"):
        record = only(result["egress"], path=f"/api/{client}?token=")
        assert record["method"] == "GET"
        assert record["host"] == "localhost"
        assert record["port"] == upstream.port
        assert record["status"] == 200
        assert record["decision"] == "allow"
        assert "with its secret injected" in record["reason"]
    assert QUERY_VALUE not in json.dumps(result["egress"])
    assert EGRESS_SECRET not in json.dumps(result)


@pytest.mark.parametrize("library", ["requests", "httpx"])
async def test_python_http_library_reaches_the_upstream_if_the_image_has_it(
    egress_server: MakeEgressServer, upstream: Upstream, library: str
) -> None:
    url = f"https://localhost:{upstream.port}/api/{library}"
    code = f"""
try:
    import {library}
except ImportError as exc:
    report(missing=str(exc))
else:
    report(status={library}.get("{url}", timeout=20).status_code)
"""
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(c, code, [cap["capability_id"]])
    out = report(result)
    if "missing" in out:
        assert out["missing"] == f"No module named '{library}'"
        pytest.skip(f"{library} is not installed in the sandbox image")
    assert out["status"] == 200
    assert auth_seen(upstream) == [[f"Bearer {EGRESS_SECRET}"]]
    assert only(result["egress"], path=f"/api/{library}")["status"] == 200


async def test_egress_works_with_a_data_dir_of_60_characters(
    sandbox_image: str, upstream: Upstream, upstream_ca_file: Path
) -> None:
    root = Path(tempfile.mkdtemp(prefix="ae-", dir="/tmp"))
    data = root / ("d" * (60 - len(str(root)) - 1))
    assert len(str(data)) == 60
    try:
        Vault(vault_path(data), load_key(data, {})).set(
            EGRESS_SECRET_NAME, EGRESS_SECRET, ["localhost"]
        )
        policy = Policy.model_validate(egress_policy(upstream.port, upstream_ca_file))
        async with Client(build_server(Config(data_dir=data), policy)) as c:
            cap = await grant(c)
            url = f"https://localhost:{upstream.port}/api/long"
            result = await call(
                c,
                "run_code",
                {
                    "code": EGRESS_PRELUDE + f'report(s=fetch("{url}")["status"])',
                    "capabilities": [cap["capability_id"]],
                },
            )
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        assert report(result.structured_content) == {"s": 200}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- 2. the secret stays outside ----------------------------------------------------------


SCAN = r"""
import glob
needles = {name: bytes.fromhex(h)[::-1] for name, h in NEEDLES.items()}
first = fetch(URL)
found = {name: [] for name in needles}
scanned = []

def look(where, data):
    scanned.append(where)
    for name, needle in needles.items():
        if needle in data:
            found[name].append(where)

look("os.environ", "\n".join(f"{k}={v}" for k, v in os.environ.items()).encode())
for pattern in ("/proc/*/environ", "/proc/*/cmdline"):
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as f:
                look(path, f.read())
        except OSError:
            pass
for top in ("/workspace", "/tmp", "/airlock", "/etc"):
    for folder, _, names in os.walk(top):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as f:
                    look(path, f.read())
            except OSError:
                pass
environs = [p for p in scanned if p.endswith("/environ")]
report(first=first["status"], found=found, files=len(scanned), environs=environs,
       bundle=os.path.isfile(os.environ["SSL_CERT_FILE"]))
"""


def files_under(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


async def test_secret_appears_nowhere_in_the_sandbox_results_store_or_logs(
    egress_server: MakeEgressServer,
    upstream: Upstream,
    data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    canary = "canary-" + secrets.token_hex(8)
    needles = {"secret": EGRESS_SECRET.encode()[::-1].hex(), "canary": canary.encode()[::-1].hex()}
    code = f"NEEDLES = {needles!r}\nURL = 'https://localhost:{upstream.port}/api/scan'\n" + SCAN
    results: list[CallToolResult] = []
    async with Client(egress_server()) as c:
        granted = await call(c, "request_capability", {"capability": EGRESS_CAP, "reason": "scan"})
        assert granted.structured_content is not None
        results.append(granted)
        cap_id = granted.structured_content["capability_id"]
        for _ in range(2):  # the second run sees the first run's workspace too
            scanned = await call(
                c,
                "run_code",
                {
                    "code": EGRESS_PRELUDE + code,
                    "capabilities": [cap_id],
                    "files": [{"path": "canary.txt", "content": canary}],
                },
            )
            results.append(scanned)
        results.append(await call(c, "revoke_capability", {"capability_id": cap_id}))
        results.append(await call(c, "end_session", {}))
    for result in results:
        assert not result.is_error, result.content
    outs = [report(r.structured_content or {}) for r in results[1:3]]
    for out in outs:
        assert out["first"] == 200
        assert out["found"]["secret"] == []
        # The scan works: it finds the canary the call put in /workspace.
        assert "/workspace/canary.txt" in out["found"]["canary"]
        assert out["files"] > 100
        assert "/proc/self/environ" in out["environs"] and len(out["environs"]) >= 3
        assert out["bundle"]
    # The secret did go out, from the proxy, during these runs.
    assert auth_seen(upstream) == [[f"Bearer {EGRESS_SECRET}"]] * 2

    for result in results:
        assert EGRESS_SECRET not in result.model_dump_json()
    assert (data_dir / "airlock.db").is_file()
    for path in files_under(data_dir):
        assert EGRESS_SECRET.encode() not in path.read_bytes(), path
    # The byte scan works: the canary file of the workspace is in a blob.
    assert any(canary.encode() in p.read_bytes() for p in files_under(data_dir / "blobs"))
    assert caplog.records, "nothing was logged, so the log check proves nothing"
    assert EGRESS_SECRET not in caplog.text
    for record in caplog.records:
        assert EGRESS_SECRET not in repr(record.args)


async def test_an_upstream_echoing_the_secret_hands_the_code_only_a_mask(
    egress_server: MakeEgressServer, upstream: Upstream, data_dir: Path
) -> None:
    code = f"""
with urllib.request.urlopen("https://localhost:{upstream.port}/api/echo", timeout=20) as r:
    print(r.headers.get("X-Echo-Authorization"))
    print(r.read().decode())
"""
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(c, code, [cap["capability_id"]])
    # The upstream got the secret and handed it back; the code saw a mask in its place.
    assert auth_seen(upstream) == [[f"Bearer {EGRESS_SECRET}"]]
    text = result["stdout"]["text"]
    assert text.splitlines()[0] == "Bearer " + "*" * len(EGRESS_SECRET)
    assert EGRESS_SECRET not in json.dumps(result)
    for path in files_under(data_dir):
        assert EGRESS_SECRET.encode() not in path.read_bytes(), path


# ---- 3. the exact environment -------------------------------------------------------------


ENV_PROBE = """
import errno
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5).close()
    relay = "connected"
except OSError as exc:
    relay = errno.errorcode.get(exc.errno, str(exc))
bundle = os.environ.get("SSL_CERT_FILE")
report(env=dict(os.environ), relay=relay, mount=os.path.exists("/airlock/egress"),
       bundle_certs=open(bundle).read().count("BEGIN CERTIFICATE") if bundle else 0)
"""


@MODES
async def test_environment_is_exactly_the_documented_set_with_and_without_egress(
    egress_server: MakeEgressServer, mode: str
) -> None:
    async with Client(egress_server(), mode=mode) as c:
        cap = await grant(c)
        with_egress = report(await egress_run(c, ENV_PROBE, [cap["capability_id"]]))
        without = report(await egress_run(c, ENV_PROBE))
    env = with_egress["env"]
    token = env.get("AIRLOCK_TOKEN", "")
    assert len(token) >= 43 and token.replace("-", "").replace("_", "").isalnum()
    proxy = f"http://airlock:{token}@127.0.0.1:3128"
    assert env == {
        **BASE_ENV,
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "",
        "no_proxy": "",
        "AIRLOCK_TOKEN": token,
        **dict.fromkeys(CA_VARIABLES, CA_BUNDLE),
        "NODE_USE_ENV_PROXY": "1",
    }
    assert with_egress["relay"] == "connected"
    assert with_egress["mount"] is True
    assert with_egress["bundle_certs"] >= 1
    assert without["env"] == BASE_ENV
    assert without["relay"] == "ECONNREFUSED"
    assert without["mount"] is False


# ---- 4. denied, each on its own -----------------------------------------------------------


async def test_host_not_granted_is_refused_403_and_the_proxy_keeps_serving(
    egress_server: MakeEgressServer, upstream: Upstream, other_upstream: Upstream
) -> None:
    other = f"localhost:{other_upstream.port}"
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(
            c,
            f'report(denied=fetch("https://{other}/api/x"), '
            f'allowed=fetch("https://localhost:{upstream.port}/api/after"))',
            [cap["capability_id"]],
        )
        await assert_alive(c)
    out = report(result)
    assert out["denied"]["status"] is None and "403" in out["denied"]["error"], result
    assert out["allowed"]["status"] == 200
    record = only(result["egress"], decision="deny")
    assert record["status"] == 403
    assert record["reason"] == (
        f"no granted capability or allow rule permits connections to {other}; "
        "no capability of this tenant's policy would allow it, so ask the operator"
    )
    assert other_upstream.seen == []
    assert upstream.paths() == ["/api/after"]
    assert record["method"] == "CONNECT"


async def test_method_outside_the_grant_is_refused_403(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    url = f"https://localhost:{upstream.port}/api/x"
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(
            c, f'report(post=fetch("{url}", method="POST", data=b"{{}}"))', [cap["capability_id"]]
        )
        await assert_alive(c)
    out = report(result)
    assert out["post"]["status"] == 403
    record = only(result["egress"], method="POST")
    assert record["status"] == 403 and record["decision"] == "deny"
    assert f"permits POST localhost:{upstream.port}/api/x" in record["reason"]
    assert out["post"]["reason"] == record["reason"]
    assert upstream.seen == []


async def test_path_outside_the_grant_is_refused_403(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(
            c,
            f'report(admin=fetch("https://localhost:{upstream.port}/admin?k={QUERY_VALUE}"))',
            [cap["capability_id"]],
        )
        await assert_alive(c)
    assert report(result)["admin"]["status"] == 403
    record = only(result["egress"], path="/admin?k=")
    assert record["status"] == 403
    assert f"permits GET localhost:{upstream.port}/admin" in record["reason"]
    assert QUERY_VALUE not in record["reason"]
    assert upstream.seen == []


async def test_plaintext_http_to_the_host_whose_secret_needs_tls_is_refused_403(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    async with Client(egress_server()) as c:
        cap = await grant(c)
        result = await egress_run(
            c,
            f'report(plain=fetch("http://localhost:{upstream.port}/api/x"))',
            [cap["capability_id"]],
        )
        await assert_alive(c)
    assert report(result)["plain"]["status"] == 403
    record = only(result["egress"], path="/api/x")
    assert record["status"] == 403
    assert "allows this only over TLS, since it sends a secret" in record["reason"]
    assert upstream.seen == []


async def test_name_resolving_to_loopback_without_allow_private_is_refused_403(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    async with Client(egress_server(allow_private=False)) as c:
        cap = await grant(c)
        result = await egress_run(
            c,
            f'report(local=fetch("https://localhost:{upstream.port}/api/x"))',
            [cap["capability_id"]],
        )
        await assert_alive(c)
    assert report(result)["local"]["status"] == 403
    record = only(result["egress"], path="/api/x")
    assert record["status"] == 403
    assert record["reason"].endswith(
        "127.0.0.1 is a loopback address (127.0.0.0/8); no capability allows such addresses "
        "unless the operator lists the range in a capability's allow_private"
    ), record["reason"]
    assert upstream.seen == []


ODD_FORMS = ("127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1")


async def test_ip_literals_in_odd_forms_are_refused(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    port = upstream.port
    # 127.0.0.1 itself is granted (without allow_private): every spelling of it fails.
    code = f"""
forms = {ODD_FORMS!r}
report(
    curl=[curl(f"https://{{f}}:{port}/api/x") for f in forms],
    urllib=[fetch(f"https://{{f}}:{port}/api/x") for f in forms],
    raw=[raw_connect(f"{{f}}:{port}") for f in forms],
)
"""
    loopback = {
        "hosts": ["127.0.0.1"],
        "ports": [port],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
    }
    async with Client(egress_server(extra={"loopback": loopback})) as c:
        cap = await grant(c, "loopback")
        result = await egress_run(c, code, [cap["capability_id"]])
        await assert_alive(c)
    out = report(result)
    # curl rewrites these to 127.0.0.1 before asking the proxy, which refuses loopback.
    assert [r["code"] for r in out["curl"]] == ["403"] * len(ODD_FORMS)
    for attempt in out["urllib"]:
        assert attempt["status"] is None and "400" in attempt["error"]
    for attempt in out["raw"]:
        assert attempt["status"] == 400
        assert "not an IPv4 address in canonical form" in attempt["reason"]
    assert upstream.seen == []
    # curl's CONNECTs to 127.0.0.1 open tunnels (the host is granted); their requests fail.
    assert len([r for r in result["egress"] if is_tunnel(r)]) == len(ODD_FORMS)
    denied = requests_of(result["egress"])
    assert len(denied) == 3 * len(ODD_FORMS)
    assert all(r["decision"] == "deny" for r in denied)
    refused = [r for r in denied if r["status"] == 403]
    assert len(refused) == len(ODD_FORMS)
    assert all("a loopback address" in r["reason"] for r in refused), refused


async def test_metadata_address_is_refused_over_http_and_https(
    egress_server: MakeEgressServer,
) -> None:
    metadata = {
        "hosts": ["169.254.169.254"],
        "ports": [80, 443],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
        "allow_private": LOOPBACK,
    }
    code = """
report(http=fetch("http://169.254.169.254/latest/meta-data/"),
       https=curl("https://169.254.169.254/latest/meta-data/"))
"""
    async with Client(egress_server(extra={"metadata": metadata})) as c:
        cap = await grant(c, "metadata")
        result = await egress_run(c, code, [cap["capability_id"]])
        await assert_alive(c)
    out = report(result)
    assert out["http"]["status"] == 403
    assert out["https"]["code"] == "403"
    assert len(requests_of(result["egress"])) == 2
    for record in requests_of(result["egress"]):
        assert record["status"] == 403 and record["host"] == "169.254.169.254"
        assert "the cloud metadata endpoint" in record["reason"]


async def test_ipv6_mapped_loopback_is_refused_403(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    mapped = {
        "hosts": ["::ffff:127.0.0.1"],
        "ports": [upstream.port],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
    }
    code = f"""
report(curl=curl("https://[::ffff:127.0.0.1]:{upstream.port}/api/x"),
       raw=raw_connect("[::ffff:127.0.0.1]:{upstream.port}"))
"""
    async with Client(egress_server(extra={"mapped": mapped})) as c:
        cap = await grant(c, "mapped")
        result = await egress_run(c, code, [cap["capability_id"]])
        await assert_alive(c)
    out = report(result)
    assert out["curl"]["code"] == "403"
    record = only(result["egress"], status=403)
    assert "IPv4-mapped 127.0.0.1, which is a loopback address" in record["reason"]
    assert upstream.seen == []


# ---- 5. token replay ----------------------------------------------------------------------


def dropped_token(upstream: Upstream) -> str | None:
    for path in upstream.paths():
        if path.startswith("/api/drop?t="):
            return path.removeprefix("/api/drop?t=")
    return None


REPLAY = """
report(curl=curl(URL, "--proxy", f"http://airlock:{TOKEN}@127.0.0.1:3128"),
       raw=raw_connect(AUTHORITY, token=TOKEN))
"""


def replay_code(token: str, port: int) -> str:
    return (
        f"TOKEN = {token!r}\nURL = 'https://localhost:{port}/api/replay'\n"
        f"AUTHORITY = 'localhost:{port}'\n" + REPLAY
    )


def assert_replay_refused(result: dict[str, Any], upstream: Upstream) -> None:
    out = report(result)
    assert out["curl"]["connect"] == "407", out["curl"]
    assert out["raw"]["status"] == 407
    assert "run token" in out["raw"]["reason"]
    refused = [r for r in result["egress"] if r["status"] == 407]
    assert len(refused) == 2 and all(r["method"] == "CONNECT" for r in refused)
    assert "/api/replay" not in upstream.paths()


async def test_run_token_of_a_live_run_is_refused_407_from_another_run(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    url = f"https://localhost:{upstream.port}"
    first_code = f"""
token = os.environ["AIRLOCK_TOKEN"]
fetch("{url}/api/drop?t=" + token)
report(held=fetch("{url}/api/hold")["status"])
"""
    first: dict[str, Any] = {}
    async with Client(egress_server()) as c:
        cap = (await grant(c))["capability_id"]

        async def first_run() -> None:
            first.update(await egress_run(c, first_code, [cap]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_run)
            token = await wait_until(lambda: dropped_token(upstream), within=60)
            # Run 1 is live and holds a request open; run 2 of the session tries its token.
            second = await egress_run(c, replay_code(token, upstream.port), [cap])
            upstream.release.set()
    assert_replay_refused(second, upstream)
    assert report(first)["held"] == 200
    assert token not in json.dumps(first["egress"]) + json.dumps(second["egress"])


async def test_run_token_after_its_run_ended_is_refused_407(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    async with Client(egress_server()) as c:
        cap = (await grant(c))["capability_id"]
        token = report(await egress_run(c, 'report(token=os.environ["AIRLOCK_TOKEN"])', [cap]))[
            "token"
        ]
        second = await egress_run(c, replay_code(token, upstream.port), [cap])
    assert_replay_refused(second, upstream)


async def test_revoked_capability_is_refused_for_a_new_run_as_a_error_text(
    egress_server: MakeEgressServer,
) -> None:
    async with Client(egress_server()) as c:
        cap = (await grant(c))["capability_id"]
        revoked = await call(c, "revoke_capability", {"capability_id": cap})
        assert revoked.structured_content is not None
        assert revoked.structured_content["revoked"] is True
        refused = await call(c, "run_code", {"code": "print(1)", "capabilities": [cap]})
        assert "unknown, expired or revoked" in error_text(refused)
        await assert_alive(c)


async def test_capability_revoked_mid_run_cuts_the_request_in_flight_and_refuses_the_next(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    url = f"https://localhost:{upstream.port}"
    code = f"""
report(one=fetch("{url}/api/one")["status"], hold=fetch("{url}/api/hold")["status"],
       two=fetch("{url}/api/two"))
"""
    done: dict[str, Any] = {}
    async with Client(egress_server()) as c:
        cap = (await grant(c))["capability_id"]

        async def the_run() -> None:
            done.update(await egress_run(c, code, [cap]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(the_run)
            await wait_until(lambda: "/api/hold" in upstream.paths(), within=60)
            revoked = await call(c, "revoke_capability", {"capability_id": cap})
            assert not revoked.is_error, revoked.content
            # The upstream still holds /api/hold: only the proxy can end that request.
    out = report(done)
    assert (out["one"], out["hold"]) == (200, None)
    assert out["two"]["status"] is None and "403" in out["two"]["error"]
    assert [r["status"] for r in requests_of(done["egress"])] == [200, 502, 403]
    cut = requests_of(done["egress"])[1]
    assert cut["path"] == "/api/hold" and "revoked or expired" in cut["reason"]
    assert "/api/two" not in upstream.paths()


async def test_end_session_forgets_the_capability_and_its_run_tokens(
    egress_server: MakeEgressServer, upstream: Upstream
) -> None:
    async with Client(egress_server()) as c:
        cap = (await grant(c))["capability_id"]
        first = await egress_run(c, 'report(token=os.environ["AIRLOCK_TOKEN"])', [cap])
        token = report(first)["token"]
        ended = await call(c, "end_session", {"session_id": first["session_id"]})
        assert not ended.is_error, ended.content
        refused = await call(c, "run_code", {"code": "print(1)", "capabilities": [cap]})
        assert "unknown, expired or revoked" in error_text(refused)
        fresh = (await grant(c))["capability_id"]
        assert fresh != cap
        second = await egress_run(c, replay_code(token, upstream.port), [fresh])
    assert second["session_id"] != first["session_id"]
    assert_replay_refused(second, upstream)


async def test_expired_capability_is_refused_as_a_error_text(
    egress_server: MakeEgressServer,
) -> None:
    now = [time.time()]
    async with Client(egress_server(clock=lambda: now[0])) as c:
        cap = (await grant(c, ttl_s=1))["capability_id"]
        now[0] += 1  # a grant is dead at exactly its expiry
        refused = await call(c, "run_code", {"code": "print(1)", "capabilities": [cap]})
        assert "unknown, expired or revoked" in error_text(refused)


# ---- 6. elicitation -----------------------------------------------------------------------


def ask_policy(port: int, ca_file: Path) -> dict[str, Any]:
    ask = {
        "description": "one org of the test upstream",
        "params": {"org": "^[a-z]{1,10}$"},
        "hosts": ["localhost"],
        "ports": [port],
        "methods": ["GET"],
        "paths": ["/api/{org}/**"],
        "approval": "ask",
        "allow_private": LOOPBACK,
        "ttl": 60,
        "max_ttl": 120,
    }
    deny = {"hosts": ["localhost"], "methods": ["GET"], "paths": ["/**"], "approval": "deny"}
    return egress_policy(port, ca_file, extra={ASK: ask, "deny-api": deny})


@pytest.fixture
def ask_server(
    make_server: Callable[..., MCPServer], upstream: Upstream, upstream_ca_file: Path
) -> Callable[[], MCPServer]:
    return lambda: make_server(ask_policy(upstream.port, upstream_ca_file))


class Human:
    """An elicitation callback that answers one way and remembers what it was asked."""

    def __init__(self, result: ElicitResult) -> None:
        self.result = result
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params.message)
        return self.result


APPROVE = ElicitResult(action="accept", content={"approve": True})


@MODES
async def test_ask_capability_approved_by_the_user_is_granted_and_scoped_to_its_params(
    ask_server: Callable[[], MCPServer], upstream: Upstream, mode: str
) -> None:
    human = Human(APPROVE)
    url = f"https://localhost:{upstream.port}"
    async with Client(ask_server(), mode=mode, elicitation_callback=human) as c:
        granted = await grant(c, ASK, params={"org": "acme"}, reason="read acme")
        result = await egress_run(
            c,
            f'report(own=fetch("{url}/api/acme/x")["status"], '
            f'other=fetch("{url}/api/evil/x")["status"])',
            [granted["capability_id"]],
        )
    assert granted["approved_by"] == "user"
    assert granted["scope"]["paths"] == ["/api/acme/**"]
    (question,) = human.asked
    assert ASK in question and "org=acme" in question and "read acme" in question
    assert report(result) == {"own": 200, "other": 403}
    assert upstream.paths() == ["/api/acme/x"]


@MODES
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(ElicitResult(action="decline"), id="decline"),
        pytest.param(ElicitResult(action="accept", content={"approve": False}), id="approve-false"),
    ],
)
async def test_ask_capability_not_approved_is_a_error_text(
    ask_server: Callable[[], MCPServer], mode: str, answer: ElicitResult
) -> None:
    human = Human(answer)
    async with Client(ask_server(), mode=mode, elicitation_callback=human) as c:
        refused = await call(
            c,
            "request_capability",
            {"capability": ASK, "reason": "r", "params": {"org": "acme"}},
        )
    assert f"did not approve capability '{ASK}'" in error_text(refused)
    assert len(human.asked) == 1


@MODES
async def test_ask_capability_from_a_client_without_elicitation_waits_for_the_operator(
    ask_server: Callable[[], MCPServer], mode: str
) -> None:
    # tests/rooms/server/test_approvals.py follows such a request to its grant.
    async with Client(ask_server(), mode=mode) as c:
        refused = await call(
            c, "request_capability", {"capability": ASK, "reason": "r", "params": {"org": "acme"}}
        )
    text = error_text(refused)
    assert "cannot ask its user" in text and "airlock approvals approve apr_" in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(
            {"capability": "deny-api"}, "the policy denies capability 'deny-api'", id="deny"
        ),
        pytest.param(
            {"capability": "nope"},
            f"unknown capability 'nope'; this server offers: {ASK}, deny-api, {EGRESS_CAP}",
            id="unknown",
        ),
        pytest.param(
            {"capability": ASK, "params": {"org": "../admin"}}, f"capability '{ASK}'", id="regex"
        ),
        pytest.param({"capability": ASK}, f"capability '{ASK}'", id="missing-param"),
        pytest.param(
            {"capability": EGRESS_CAP, "ttl_s": 601},
            "above the maximum of 600 s",
            id="ttl-above-max",
        ),
        pytest.param({"capability": EGRESS_CAP, "ttl_s": 0}, "at least 1", id="ttl-zero"),
    ],
)
async def test_capability_request_outside_the_policy_is_a_tool_error_without_asking(
    ask_server: Callable[[], MCPServer], args: dict[str, Any], fragment: str
) -> None:
    human = Human(APPROVE)
    async with Client(ask_server(), elicitation_callback=human) as c:
        refused = await call(c, "request_capability", {"reason": "r", **args})
        assert fragment in error_text(refused)
        assert human.asked == []
        # Nothing was granted: the session holds no capability a run could use.
        await assert_alive(c)


async def test_ask_capability_with_ttl_above_max_is_refused_before_asking(
    ask_server: Callable[[], MCPServer],
) -> None:
    human = Human(APPROVE)
    async with Client(ask_server(), elicitation_callback=human) as c:
        refused = await call(
            c,
            "request_capability",
            {"capability": ASK, "reason": "r", "params": {"org": "acme"}, "ttl_s": 121},
        )
    assert "above the maximum of 120 s" in error_text(refused)
    assert human.asked == [], "the human was asked to approve a request the policy refuses"


# ---- 7. the audit trail -------------------------------------------------------------------


async def airlock_cli(*args: str) -> str:
    done = await airlock_async(*args, env=without_airlock_settings())
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_audit_shows_egress_decisions_and_grants_without_secrets_or_query_values(
    egress_server: MakeEgressServer, upstream: Upstream, data_dir: Path
) -> None:
    url = f"https://localhost:{upstream.port}"
    async with Client(egress_server()) as c:
        cap = (await grant(c, reason="audit me"))["capability_id"]
        result = await egress_run(
            c,
            f'report(ok=fetch("{url}/api/audit?k={QUERY_VALUE}"), no=fetch("{url}/admin"))',
            [cap],
        )
        await call(c, "revoke_capability", {"capability_id": cap})
    fetched = report(result)
    egress = await airlock_cli("audit", "egress", "--data-dir", str(data_dir))
    # Should it fail: what the code saw, and what the proxy recorded.
    assert (fetched["ok"]["status"], fetched["no"]["status"]) == (200, 403), (fetched, egress)
    lines = egress.splitlines()
    allowed = [line for line in lines if f"GET localhost:{upstream.port}/api/audit?k=" in line]
    assert len(allowed) == 1 and " allow " in allowed[0] and " 200 " in allowed[0]
    assert f"[injected {EGRESS_SECRET_NAME}]" in allowed[0]
    assert "127.0.0.1" in allowed[0]
    denied = [line for line in lines if f"GET localhost:{upstream.port}/admin" in line]
    assert len(denied) == 1 and " deny " in denied[0] and " 403 " in denied[0]
    assert result["run_id"] in allowed[0]
    grants = await airlock_cli("audit", "capabilities", "--data-dir", str(data_dir))
    (row,) = [line for line in grants.splitlines() if EGRESS_CAP in line]
    assert "policy" in row and "audit me" in row and result["session_id"] in row
    assert row.split()[5] != "-", "the revocation time is missing"
    for text in (egress, grants):
        assert EGRESS_SECRET not in text
        assert QUERY_VALUE not in text


# ---- 8. the tenant's own [egress] settings ------------------------------------------------


async def test_a_tenants_stricter_egress_settings_hold_not_the_servers(
    tmp_path: Path,
    sandbox_image: str,
    sandbox_runtime: str,
    upstream: Upstream,
    upstream_ca_file: Path,
) -> None:
    """The server's policy lets every run GET /open/** of the upstream; acme's own policy
    allows nothing without a capability. Both places that take a run's [egress] settings
    (whether the run gets a proxy at all, and the rules its proxy decides by) must take
    acme's, which no server default below the tools can stand in for."""
    url = f"https://localhost:{upstream.port}"
    common = {"sandbox": {"runtime": sandbox_runtime}, "pool": {"size": 0}}
    server_policy = {**egress_policy(upstream.port, upstream_ca_file), **common}
    open_rule = {
        "name": "open-api",
        "hosts": ["localhost"],
        "ports": [upstream.port],
        "methods": ["GET"],
        "paths": ["/open/**"],
        "allow_private": LOOPBACK,
    }
    server_policy["egress"] = {**server_policy["egress"], "allow": [open_rule]}
    acme_policy = {**egress_policy(upstream.port, upstream_ca_file), **common}

    def serve(tenant: str) -> MCPServer:
        data = tmp_path / tenant
        Vault(vault_path(data), load_key(data, {})).set(
            EGRESS_SECRET_NAME, EGRESS_SECRET, ["localhost"]
        )
        return build_server(
            Config(data_dir=data),
            Policy.model_validate(server_policy),
            tenant_policies={"acme": Policy.model_validate(acme_policy)},
            local_tenant=tenant,
        )

    async with Client(serve("globex")) as globex:  # no policy of its own: the server's
        served = report(await egress_run(globex, f'report(open=fetch("{url}/open/globex"))'))
    assert served["open"]["status"] == 200
    async with Client(serve("acme")) as acme:
        bare = await egress_run(acme, f'report(open=fetch("{url}/open/bare"))')
        cap = await grant(acme)
        result = await egress_run(
            acme,
            f'report(open=fetch("{url}/open/granted"), api=fetch("{url}/api/granted"))',
            [cap["capability_id"]],
        )
    # No capability and no allow rule of acme's: the run has no proxy to reach at all,
    # so nothing refused it and nothing was recorded.
    unproxied = report(bare)
    assert unproxied["open"]["status"] is None, unproxied
    assert "403" not in unproxied["open"]["error"] and bare["egress"] == [], bare
    granted = report(result)
    assert granted["open"]["status"] == 403, granted
    assert granted["api"]["status"] == 200, granted
    record = only(result["egress"], path="/open/granted")
    assert record["decision"] == "deny" and "open-api" not in record["reason"]
    assert upstream.paths() == ["/open/globex", "/api/granted"]

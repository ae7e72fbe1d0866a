"""Serving over Streamable HTTP for remote orchestrators.

Binds loopback by default and refuses any other address without authentication.
DNS-rebinding protection (Host/Origin checks) stays on. uvicorn's own SIGINT and
SIGTERM handling runs the server's lifespan to its end, which ends every session.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
from types import FrameType

import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from airlock.errors import InvalidRequest, PolicyInvalid
from policies import Policy, load_policy

from .app import build_server
from .auth import AirlockTokenVerifier, AuthConfig
from .config import Config
from .metrics import Metrics

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve_http(
    config: Config,
    policy: Policy,
    *,
    host: str,
    port: int,
    auth: AuthConfig | None,
    allowed_hosts: list[str],
    allowed_origins: list[str],
    metrics: Metrics | None = None,
) -> None:
    if auth is None and not is_loopback(host):
        raise InvalidRequest(
            f"refusing to serve on {host} without authentication: anyone who can reach it "
            "could run code; pass --auth FILE (create keys with `airlock keys create TENANT`) "
            "or bind 127.0.0.1"
        )
    base = f"http://{_authority(host, port)}"
    settings = None
    verifier = None
    if auth is not None:
        verifier = AirlockTokenVerifier(auth)
        issuer = auth.jwt.issuer if auth.jwt is not None else base
        settings = AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(base + MCP_PATH),
            required_scopes=None,
            # The verifier checks JWT audiences itself; API keys carry no resource.
            validate_token_resource=False,
        )
    tenant_policies = _tenant_policies(auth, policy)
    mcp = build_server(
        config,
        policy,
        http=True,
        token_verifier=verifier,
        auth=settings,
        tenant_policies=tenant_policies,
        metrics=metrics,
    )
    hosts = [_authority(host, port), f"localhost:{port}", f"127.0.0.1:{port}", *allowed_hosts]
    origins = [f"http://localhost:{port}", f"http://127.0.0.1:{port}", *allowed_origins]
    app = mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        session_idle_timeout=float(policy.sessions.idle_ttl_s),
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=hosts,
            allowed_origins=origins,
        ),
        host=host,
    )
    log.info(
        "serving MCP on %s%s (%s); data in %s",
        base,
        MCP_PATH,
        "bearer tokens required" if auth else "no authentication: loopback only",
        config.data_dir,
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM (our lifespan ends every session),
    # then raises the signal again for the previous handler: make that a clean exit.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_cleanly)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def _tenant_policies(auth: AuthConfig | None, default: Policy) -> dict[str, Policy]:
    """Each tenant's own policy file, loaded and checked now (an invalid one stops startup).

    The image, runtime and warm pool are the server's: a tenant policy may not change them.
    """
    policies: dict[str, Policy] = {}
    for tenant in sorted(auth.tenants if auth else ()):
        path = auth.policy_for(tenant) if auth else None
        if path is None:
            continue
        loaded = load_policy(path)
        if loaded.sandbox != default.sandbox or loaded.pool != default.pool:
            raise PolicyInvalid(
                str(path),
                ["sandbox and pool are set by the server's policy; remove them from this file"],
            )
        policies[tenant] = loaded
    return policies


def _exit_cleanly(signum: int, _: FrameType | None) -> None:
    log.info("stopped (%s)", signal.Signals(signum).name)
    raise SystemExit(0)

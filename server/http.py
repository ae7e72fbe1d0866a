"""Serving over Streamable HTTP for remote orchestrators.

Binds loopback by default and refuses any other address without authentication.
Every request passes `guard.RequestGuard` first (Host/Origin checks, DNS-rebinding
protection, on every route, and no CSRF); /metrics and /approvals need the operator token
of the data directory or a bearer key (`bearer`); the operator console is mounted at
/console (`console`), signed in with that token. uvicorn's own SIGINT and SIGTERM
handling runs the server's lifespan to its end, which ends every session; its log records
go to the one handler `logs.setup_logging` installed, like every other library's.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
from types import FrameType

import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from airlock.errors import AddressInUse, InvalidRequest, PolicyInvalid
from airlock.policies import Policy, load_policy
from airlock.sandbox.image import image_inputs

from .app import build_server
from .auth import AirlockTokenVerifier, AuthConfig
from .bearer import RouteAuth, operator_token
from .config import Config
from .console import CONSOLE_PATH, console_for
from .guard import RequestGuard
from .metrics import Metrics
from .registration.lifespan import ForRoutes

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
    # Bound before anything starts, so a taken port is one clear sentence and nothing else.
    listener = listen_socket(host, port)
    app = http_app(
        config,
        policy,
        host=host,
        port=port,
        auth=auth,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        metrics=metrics,
    )
    log.info(
        "serving MCP on http://%s%s (%s), the operator console on %s; data in %s",
        _authority(host, port),
        MCP_PATH,
        "bearer tokens required" if auth else "no authentication: loopback only",
        CONSOLE_PATH,
        config.data_dir,
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM (our lifespan ends every session),
    # then raises the signal again for the previous handler: make that a clean exit.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_cleanly)
    # log_config=None: uvicorn adds no handler of its own, so its records reach ours.
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, log_config=None)
    )
    server.run(sockets=[listener])


def http_app(
    config: Config,
    policy: Policy,
    *,
    host: str,
    port: int,
    auth: AuthConfig | None,
    allowed_hosts: list[str],
    allowed_origins: list[str],
    metrics: Metrics | None = None,
) -> Starlette:
    """The Streamable HTTP app: MCP on /mcp behind bearer auth when `auth` is given, every
    route behind the request guard, and the operator token made if the data directory
    has none."""
    base = f"http://{_authority(host, port)}"
    verifier = AirlockTokenVerifier(auth) if auth is not None else None
    settings = _auth_settings(auth, base) if auth is not None else None
    tenant_policies = _tenant_policies(auth, policy)
    token, for_routes = operator_token(config.data_dir), ForRoutes()
    mcp = build_server(
        config,
        policy,
        http=True,
        token_verifier=verifier,
        auth=settings,
        tenant_policies=tenant_policies,
        metrics=metrics,
        operator_token=token,
        for_routes=for_routes,
    )
    security = security_settings(host, port, allowed_hosts, allowed_origins)
    app = mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        session_idle_timeout=float(policy.sessions.idle_ttl_s),
        transport_security=security,
        host=host,
    )
    app.mount(CONSOLE_PATH, console_for(config, policy, for_routes, RouteAuth(verifier, token)))
    # Outermost of the app's middleware: before the SDK's bearer auth and every route.
    app.add_middleware(RequestGuard, security=security, forms_under=CONSOLE_PATH)
    return app


def security_settings(
    host: str, port: int, allowed_hosts: list[str], allowed_origins: list[str]
) -> TransportSecuritySettings:
    """The Host and Origin values a server on host:port answers (DNS-rebinding protection)."""
    hosts = [_authority(host, port), f"localhost:{port}", f"127.0.0.1:{port}", *allowed_hosts]
    origins = [f"http://localhost:{port}", f"http://127.0.0.1:{port}", *allowed_origins]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def _auth_settings(auth: AuthConfig, base: str) -> AuthSettings:
    """Bearer auth, with RFC 9728 metadata only when it has something true to say.

    The metadata names an authorization server; only a [jwt] issuer is one (Airlock
    issues nothing: its API keys are made by `airlock keys create`). Without JWTs there is
    no metadata and the 401 carries no `resource_metadata` link; `issuer_url` is then
    unused, since Airlock has no authorization-server routes.
    """
    issuer = auth.jwt.issuer if auth.jwt is not None else base
    # From strings, so the settings keep an issuer exactly as written (no added "/"):
    # clients compare it with the token's `iss` character by character.
    return AuthSettings.model_validate(
        {
            "issuer_url": issuer,
            "resource_server_url": base + MCP_PATH if auth.jwt is not None else None,
            "required_scopes": None,
            # The verifier checks JWT audiences itself; API keys carry no resource.
            "validate_token_resource": False,
        }
    )


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; `AddressInUse` (exit 2) when the port is taken."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidRequest(f"cannot bind {host!r}: {exc.strerror}; pass another --host") from exc
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(f"port {port} is in use; pick another with --port") from exc
        raise InvalidRequest(
            f"cannot listen on {_authority(host, port)}: {exc.strerror}; "
            "pick another --host or --port"
        ) from exc
    return listener


def _tenant_policies(auth: AuthConfig | None, default: Policy) -> dict[str, Policy]:
    """Each tenant's own policy file, loaded and checked now (an invalid one stops startup).

    The runtime, the warm pool and a named [sandbox] image are the server's: a tenant policy
    may not change them. Its [image] section (lock file, Debian packages) is its own.
    """
    policies: dict[str, Policy] = {}
    for tenant in sorted(auth.tenants if auth else ()):
        path = auth.policy_for(tenant) if auth else None
        if path is None:
            continue
        loaded = load_policy(path)
        if (loaded.sandbox, loaded.pool, loaded.console) != (
            default.sandbox,
            default.pool,
            default.console,
        ):
            raise PolicyInvalid(
                str(path),
                [
                    "sandbox, pool and console are set by the server's policy; remove them "
                    "from this file"
                ],
            )
        # A tenant's [image] is built on its first run; its lock file is checked now.
        image_inputs(loaded.image)
        policies[tenant] = loaded
    return policies


def _exit_cleanly(signum: int, _: FrameType | None) -> None:
    log.info("stopped (%s)", signal.Signals(signum).name)
    raise SystemExit(0)

"""What an agent may ask for by name ([capabilities.NAME]): hosts, methods and paths with
params, a secret the proxy injects and how, a lifetime and who approves; and the caps on
live grants and waiting approvals ([broker]). The parts shared with egress rules are
`traffic.py`; scopes and durations are read by `policies.capabilities`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from airlock.policies.capabilities import (
    PARAM_NAME,
    format_duration,
    parse_duration,
    path_placeholders,
)

from .section import Section, all_problems, problem, quoted, reasoned
from .traffic import (
    Cidrs,
    Hosts,
    Methods,
    Paths,
    Ports,
    Tls,
    TrafficRule,
    tls_shape_problems,
)

_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # as broker/vault.py names entries
_HEADER_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the proxy itself manages (framing, hop-by-hop, proxy auth): a secret put
# there would be stripped, or would change how the request is framed.
_PROXY_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "keep-alive",
    }
)
_MAX_GRANT_S = 7 * 86400
_DURATION_TEXT = r"^(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?$"


def _check_param_name(value: str) -> str:
    if not PARAM_NAME.fullmatch(value):
        raise ValueError(
            f"{quoted(value)} is not a valid param name; use letters, digits and "
            'underscores, not starting with a digit, such as "org"'
        )
    return value


def _check_regex(value: str) -> str:
    if not value:
        raise ValueError(
            "an empty regex matches only an empty value, which is never accepted; write "
            'the values allowed, such as "[A-Za-z0-9-]{1,39}"'
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(
            f"{quoted(value)} is not a valid regular expression ({exc}); values must match it "
            'entirely, so anchors are optional, as in "[A-Za-z0-9-]{1,39}"'
        ) from None
    return value


def _check_secret_name(value: str) -> str:
    if not _SECRET_NAME.fullmatch(value):
        raise ValueError(
            "secret is the name of a vault entry, never its value; use 1 to 64 letters, "
            'digits, ".", "_" or "-", such as "github_token", and store the value with '
            "`airlock secrets set`"
        )
    return value


def _check_header(value: str) -> str:
    if not _HEADER_TOKEN.fullmatch(value):
        raise ValueError(
            f"{quoted(value)} is not a valid HTTP header name; use letters, digits and "
            'hyphens, such as "Authorization"'
        )
    if value.lower() in _PROXY_HEADERS:
        raise ValueError(
            f"{quoted(value)} is managed by the proxy and cannot carry a secret; inject into "
            'a header such as "Authorization"'
        )
    return value


def _check_duration(value: Any) -> int:
    seconds = parse_duration(value)
    if seconds < 1:
        raise ValueError('a duration must be at least 1 second; write one such as "15m"')
    return seconds


_ParamName = Annotated[
    str,
    AfterValidator(reasoned("param_name", _check_param_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{PARAM_NAME.pattern}$"}),
]
_Regex = Annotated[str, AfterValidator(reasoned("regex", _check_regex))]
_SecretName = Annotated[
    str,
    AfterValidator(reasoned("secret_name", _check_secret_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{_SECRET_NAME.pattern}$"}),
]
_HeaderName = Annotated[str, AfterValidator(reasoned("header", _check_header))]

Duration = Annotated[
    int,
    BeforeValidator(reasoned("duration", _check_duration)),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "pattern": _DURATION_TEXT},
            ]
        }
    ),
]
"""A positive duration: "30s", "15m", "1h", "2h30m", "1d" or whole seconds; read as
int seconds."""


class InjectSpec(Section):
    """How the proxy puts a capability's secret into each request it allows."""

    header: _HeaderName
    """Request header that carries the secret, such as "Authorization"; required.
    Headers the proxy manages (Host, Content-Length, Transfer-Encoding, Connection,
    Upgrade, Proxy-Authorization, Proxy-Connection, TE, Trailer, Keep-Alive) are refused."""

    format: str
    """Header value with "{secret}" exactly once where the secret goes, such as
    "Bearer {secret}"; required. The proxy replaces that literal text; no other braces
    and only printable ASCII are allowed."""

    @field_validator("format")
    @classmethod
    def _one_secret_slot(cls, value: str) -> str:
        if value.count("{secret}") != 1:
            raise problem(
                "inject_format",
                'format must contain "{secret}" exactly once, where the secret goes, '
                'such as "Bearer {secret}"',
            )
        rest = value.replace("{secret}", "")
        if "{" in rest or "}" in rest:
            raise problem(
                "inject_format",
                'format may contain no braces besides "{secret}"; remove the others',
            )
        if any(not (" " <= ch <= "~") for ch in rest):
            raise problem(
                "inject_format",
                "format becomes a header value, so it may hold only printable ASCII "
                "characters and spaces; remove the others",
            )
        return value


class Capability(TrafficRule):
    """Something an agent may ask for by name: HTTP access to some hosts, methods
    and paths, optionally with a secret the proxy injects, for a limited time."""

    description: str = ""
    """What the capability is for, shown to the agent and to whoever approves it.
    Missing or empty means the capability is listed by name only."""

    params: dict[_ParamName, _Regex] = {}
    """Values the agent fills in, each with the regex the value must fully match
    (anchors are implied); each is used as a whole path segment "{name}" in paths.
    Missing or empty: the capability takes no params."""

    hosts: Hosts
    """Hosts reachable with this capability; required, at least one. Exact names,
    "*.example.com" for the subdomains of example.com (not example.com itself), or
    canonical IP literals. Written names are lowercased, lose a trailing dot and are
    stored as punycode."""

    ports: Ports = (443,)
    """Destination ports; missing means [443]."""

    methods: Methods = ()
    """HTTP methods allowed: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS. Required
    with tls = "terminate"; must be left out with "passthrough", whose tunnels the
    proxy cannot look into."""

    paths: Paths = ()
    """Path patterns allowed: "*" is one segment, "**" any number of segments,
    "{name}" a param. Required with tls = "terminate"; must be left out with
    "passthrough"."""

    secret: _SecretName | None = None
    """Name of the vault entry the proxy injects (never the value itself). Missing
    means no secret; then inject must be missing too."""

    inject: InjectSpec | None = None
    """Where and how the secret goes into requests; required exactly when secret is set."""

    ttl: Duration = 900
    """Lifetime of a grant when the agent names none, such as "15m"; missing means
    15 minutes. At most max_ttl."""

    max_ttl: Duration = 3600
    """Longest lifetime an agent may ask for, such as "1h"; missing means 1 hour.
    At most 7 days."""

    approval: Literal["auto", "ask", "deny"] = "ask"
    """"auto" grants without asking, "ask" asks the human first (and refuses when the
    client cannot ask), "deny" always refuses. Missing means "ask"."""

    allow_private: Cidrs = ()
    """Private or otherwise guarded address ranges (CIDR) these hosts may resolve to,
    despite the SSRF guard. Missing or empty: none; use only for hosts you run."""

    tls: Tls = "terminate"
    """"terminate" (missing means this) lets the proxy see and check each request and
    inject the secret; "passthrough" is an opaque tunnel that never carries a secret."""

    @field_validator("paths")
    @classmethod
    def _placeholders_declared(
        cls, paths: tuple[str, ...], info: ValidationInfo
    ) -> tuple[str, ...]:
        params = info.data.get("params")
        if params is None:  # params is invalid itself and reported on its own
            return paths
        for pattern in paths:
            for name in path_placeholders(pattern):
                if name not in params:
                    raise problem(
                        "undeclared_param",
                        f"{quoted(pattern)} uses {{{name}}}, which params does not declare; "
                        f'add {name} = "<regex>" to params or take it out of the path',
                    )
        return paths

    @field_validator("max_ttl")
    @classmethod
    def _max_ttl_bounded(cls, max_ttl: int) -> int:
        if max_ttl > _MAX_GRANT_S:
            raise problem(
                "max_ttl_too_long",
                f"max_ttl ({format_duration(max_ttl)}) is longer than 7 days, the longest "
                'a grant may live; write at most "7d"',
            )
        return max_ttl

    @model_validator(mode="after")
    def _parts_agree(self) -> Capability:
        found = []
        if self.tls == "passthrough" and (self.secret is not None or self.inject is not None):
            found.append(
                problem(
                    "passthrough_secret",
                    "passthrough tunnels are opaque and never carry injected secrets; remove "
                    'secret/inject or use tls = "terminate"',
                )
            )
        if self.secret is not None and self.inject is None:
            found.append(
                problem(
                    "secret_without_inject",
                    "secret is set but inject is missing; add inject = { header = "
                    '"Authorization", format = "Bearer {secret}" } or remove secret',
                )
            )
        if self.inject is not None and self.secret is None:
            found.append(
                problem(
                    "inject_without_secret",
                    'inject is set but secret is missing; add secret = "<vault entry name>" '
                    "or remove inject",
                )
            )
        found += tls_shape_problems(self.tls, self.methods, self.paths)
        used = {name for pattern in self.paths for name in path_placeholders(pattern)}
        found += [
            problem(
                "unused_param",
                f"param {quoted(name)} is declared but no path uses {{{name}}}, so its "
                "value would limit nothing; use it in a path or remove it",
            )
            for name in self.params
            if name not in used
        ]
        if self.ttl > self.max_ttl:
            found.append(
                problem(
                    "ttl_above_max",
                    f"ttl ({format_duration(self.ttl)}) is longer than max_ttl "
                    f"({format_duration(self.max_ttl)}); shorten ttl or raise max_ttl",
                )
            )
        all_problems(found)
        return self


class BrokerSettings(Section):
    """Caps on how many capability grants may be live at once, and how long a request
    waits for the operator's approval."""

    max_capabilities_per_session: int = Field(default=32, gt=0)
    """Most live grants one session may hold."""

    max_live_grants_per_tenant: int = Field(default=256, gt=0)
    """Most live grants across all sessions of one tenant."""

    approval_wait_s: int = Field(default=900, gt=0, le=86_400)
    """Seconds a capability request that needs a human waits for the operator
    (`airlock approvals approve|deny`) when the client cannot ask its human; after that
    it expires, refused. Missing: 900 (15 minutes)."""

    max_pending_approvals_per_session: int = Field(default=5, gt=0, le=1000)
    """Most capability requests one session may have waiting for the operator at once;
    one more is refused until the operator decides one or one expires, so no agent can
    bury the operator's queue. Missing: 5."""

    max_pending_approvals_per_tenant: int = Field(default=20, gt=0, le=10_000)
    """Most capability requests all sessions of one tenant may have waiting at once (a new
    session has a cap of its own, so this is what bounds the operator's queue). Missing: 20."""

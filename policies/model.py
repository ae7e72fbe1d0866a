"""The policy model: what an operator may configure, its defaults and its bounds.

Only the shape and the rules that relate one value to another live here. Reading
files and turning validation errors into messages is `policies.load`; applying a
policy to a run is the job of the rooms that import this one.

Every section is frozen and rejects unknown keys, so a typo in a policy file is an
error rather than a setting that silently does nothing. New sections are added as
further fields of `Policy`, each with a default so that older files keep loading.

Capabilities and egress rules are validated here down to their parts: host patterns
are canonicalized by `policies.hosts`, path patterns and durations are read by
`policies.capabilities`. Every rejection says what to write instead.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from airlock.policies.capabilities import (
    PARAM_NAME,
    format_duration,
    parse_duration,
    path_placeholders,
    validate_path_pattern,
)
from airlock.policies.globs import (
    DEFAULT_EXCLUDED,
    DEFAULT_IGNORED,
    DEFAULT_PROTECTED,
    matching_glob,
    protecting_glob,
    validate_glob,
)
from airlock.policies.hosts import canonical_host_pattern
from airlock.policies.references import parse_reference
from airlock.validation import PYDANTIC_ERROR_TYPES

_MIB = 1024 * 1024


class _Section(BaseModel):
    # strict: TOML values are already typed, so a quoted number or a boolean where a
    # count belongs is a mistake in the file, not something to coerce.
    # use_attribute_docstrings: the docstring under each field becomes its JSON Schema
    # description, which is what editors show operators.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class SandboxSettings(_Section):
    """Which image sandboxes start from and which container runtime runs them."""

    image: str | None = Field(default=None, min_length=1)
    """Image reference for sandboxes, such as the "registry:5000/airlock-sandbox@sha256:..."
    that `airlock image push` prints: the server pulls it (by digest when it has one) when
    the engine lacks it, and refuses an image whose in-container runner is not this
    Airlock's. Missing means the image Airlock builds itself; an empty string is rejected."""

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        return _reference(value)

    runtime: Literal["auto", "runc", "runsc"] = "auto"
    """OCI runtime. "auto" (missing means this): gVisor ("runsc") when the Docker engine
    has it registered, else runc with a warning. "runsc" insists on gVisor (a run fails
    with the fix when it is not registered); "runc" opts out of gVisor."""


class Limits(_Section):
    """Resource limits of one run."""

    timeout_s: int = Field(default=30, gt=0)
    """Wall-clock seconds a run gets when the call names no timeout; 1..max_timeout_s."""

    max_timeout_s: int = Field(default=300, gt=0, le=3600)
    """Largest timeout_s a call may ask for, in seconds; at most 3600."""

    memory_mb: int = Field(default=512, ge=64, le=16384)
    """Memory of the container in MiB, with no extra swap; 64..16384."""

    cpus: float = Field(default=1.0, ge=0.1, le=64)
    """CPU quota in cores (fractions allowed), counted per second; 0.1..64."""

    pids: int = Field(default=128, ge=16, le=4096)
    """Most processes and threads alive at once in the container; 16..4096."""

    workspace_mb: int = Field(default=256, gt=0)
    """Size in MiB of the /workspace tmpfs, where the code runs and leaves its files."""

    tmp_mb: int = Field(default=64, gt=0)
    """Size in MiB of the /tmp tmpfs, and of the code's home (/home/sandbox, a tmpfs too)."""

    @model_validator(mode="after")
    def _timeout_within_max(self) -> Limits:
        if self.timeout_s > self.max_timeout_s:
            raise PydanticCustomError(
                "timeout_above_max",
                "timeout_s ({timeout_s}) is larger than max_timeout_s ({max_timeout_s}); "
                "lower timeout_s or raise max_timeout_s",
                {"timeout_s": self.timeout_s, "max_timeout_s": self.max_timeout_s},
            )
        return self


class OutputLimits(_Section):
    """How much of stdout and stderr a run keeps and returns."""

    inline_bytes: int = Field(default=65536, gt=0)
    """Bytes of each stream returned inline in the result; at most stream_cap_bytes."""

    stream_cap_bytes: int = Field(default=8 * _MIB, gt=0)
    """Bytes of each stream kept as an artifact; beyond that the stream is counted and
    hashed but its bytes are dropped."""

    @model_validator(mode="after")
    def _inline_within_cap(self) -> OutputLimits:
        if self.inline_bytes > self.stream_cap_bytes:
            raise PydanticCustomError(
                "inline_above_cap",
                "inline_bytes ({inline_bytes}) is larger than stream_cap_bytes "
                "({stream_cap_bytes}); lower inline_bytes or raise stream_cap_bytes",
                {"inline_bytes": self.inline_bytes, "stream_cap_bytes": self.stream_cap_bytes},
            )
        return self


class FileLimits(_Section):
    """Caps on files copied into a sandbox and on artifacts copied out."""

    max_input_files: int = Field(default=256, gt=0)
    """Most files one call may send in."""

    max_input_bytes: int = Field(default=16 * _MIB, gt=0)
    """Total decoded size in bytes of the files one call sends in."""

    max_artifact_files: int = Field(default=512, gt=0)
    """Most files one run may leave behind as artifacts."""

    max_artifact_file_bytes: int = Field(default=32 * _MIB, gt=0)
    """Largest single artifact file in bytes."""

    max_artifact_total_bytes: int = Field(default=128 * _MIB, gt=0)
    """Total size in bytes of the artifacts of one run."""

    max_path_length: int = Field(default=255, gt=0)
    """Longest relative path, in characters, of an input file or artifact."""

    max_workspace_entries: int = Field(default=10_000, gt=0)
    """Most entries (files and directories) a run's final /workspace listing may hold; past
    it, the entries listed later are not kept and the run deletes nothing from the session."""


class SessionSettings(_Section):
    """Lifetime of session leases."""

    idle_ttl_s: int = Field(default=900, gt=0)
    """Seconds a session lease lives without a call before it ends; at most max_lifetime_s."""

    max_lifetime_s: int = Field(default=28800, gt=0)
    """Seconds after which a session lease ends however busy it is."""

    @model_validator(mode="after")
    def _idle_within_lifetime(self) -> SessionSettings:
        if self.idle_ttl_s > self.max_lifetime_s:
            raise PydanticCustomError(
                "idle_above_lifetime",
                "idle_ttl_s ({idle_ttl_s}) is larger than max_lifetime_s ({max_lifetime_s}); "
                "lower idle_ttl_s or raise max_lifetime_s",
                {"idle_ttl_s": self.idle_ttl_s, "max_lifetime_s": self.max_lifetime_s},
            )
        return self


class BrowserSettings(_Section):
    """The browser box of `browse`: its own limits, apart from run_code's [limits]."""

    timeout_s: int = Field(default=30, gt=0)
    """Wall-clock seconds a browse gets when the call names none; 1..max_timeout_s."""

    max_timeout_s: int = Field(default=120, gt=0, le=600)
    """Largest timeout_s a browse may ask for, in seconds; at most 600."""

    memory_mb: int = Field(default=1024, ge=256, le=16384)
    """Memory of the browser container in MiB, no extra swap; Chromium needs 256 at least."""

    cpus: float = Field(default=1.0, ge=0.1, le=64)
    """CPU quota of the browser container in cores; 0.1..64."""

    pids: int = Field(default=256, ge=64, le=4096)
    """Most processes and threads alive at once in the browser container (Chromium runs
    several processes of dozens of threads each); 64..4096."""

    tmp_mb: int = Field(default=256, gt=0)
    """Size in MiB of the box's /tmp (the fresh profile) and of its home."""

    max_pages: int = Field(default=3, ge=1, le=20)
    """Most pages (tabs, popups) open in one browse; a page opened past it is closed."""

    max_bytes: int = Field(default=32 * _MIB, gt=0)
    """Most bytes a browse keeps: screenshot, page text and downloads together."""

    width: int = Field(default=1280, ge=320, le=3840)
    """Viewport width in CSS pixels (the screenshot's width)."""

    height: int = Field(default=800, ge=240, le=2160)
    """Viewport height in CSS pixels (the screenshot's height)."""

    keep_idle_s: int = Field(default=300, gt=0, le=86_400)
    """Seconds a kept browser (`browse(keep=true)`) may sit unused before it is closed."""

    max_kept: int = Field(default=2, ge=0, le=50)
    """Most kept browsers open at once in one session; 0 turns keeping off."""

    max_kept_per_tenant: int = Field(default=8, ge=0, le=1000)
    """Most kept browsers open at once across a tenant's sessions on one server."""

    pool: int = Field(default=1, ge=0, le=16)
    """Started, never-used browser boxes kept ready (Chromium running, each with a CA of its
    own, so a one-shot browse skips the box's and Chromium's start); about 250 MB each while
    it waits. Missing means 1 where the browser image exists, 0 turns the pool off; at most
    16. Read from the server's policy only (a tenant's does not size the server's pool)."""

    secrets: Literal["refuse", "withhold"] = "refuse"
    """What `browse` does with a capability that has a secret. A browser box never carries
    one, whatever this says: a page can make its browser send any request to a granted host
    (a script's fetch, an image, a submitted form) and read the answer back, so a credential
    there would be the page's to use. "refuse" (missing means this) answers such a call with
    one sentence and starts no box; "withhold" lets the page reach the capability's hosts
    without the secret (the egress record says so)."""

    @model_validator(mode="after")
    def _timeout_within_max(self) -> BrowserSettings:
        if self.timeout_s > self.max_timeout_s:
            raise PydanticCustomError(
                "timeout_above_max",
                "[browser] timeout_s ({timeout_s}) is larger than max_timeout_s "
                "({max_timeout_s}); lower timeout_s or raise max_timeout_s",
                {"timeout_s": self.timeout_s, "max_timeout_s": self.max_timeout_s},
            )
        return self


class ConsoleSettings(_Section):
    """The operator console (`/console`): how long a sign-in lasts. Set by the server's
    policy only; a tenant's policy may not change it."""

    session_s: int = Field(default=28800, gt=0, le=7 * 86400)
    """Seconds a console sign-in stays valid (its signed cookie expires then, and the
    server refuses it after); sign out to end it sooner. At most 7 days."""


class PoolSettings(_Section):
    """The warm pool of started, never-used containers (used once the pool exists)."""

    size: int = Field(default=4, ge=0, le=64)
    """Started, never-used containers kept ready per kind of container (image, runtime,
    limits, with or without egress); missing means 4, 0 disables the pool; at most 64."""


_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")
_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # as broker/vault.py names entries
_HEADER_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
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


def _q(text: str) -> str:
    """`text` in double quotes, as TOML writes strings, for messages."""
    return json.dumps(text, ensure_ascii=False)


def _reference(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_reference(value)
        except ValueError as exc:
            raise _problem("image_reference", str(exc)) from None
    return value


def _problem(kind: str, reason: str) -> PydanticCustomError:
    # The reason goes in as context, so braces in it ("{org}") are kept as written.
    return PydanticCustomError(kind, "{reason}", {"reason": reason})


def _all_problems(found: list[PydanticCustomError]) -> None:
    """Raise every problem a cross-key check found at once (pydantic stops at one raise);
    `policies.load` lists each of `reasons` on its own line."""
    if len(found) == 1:
        raise found[0]
    if found:
        reasons = [str(problem) for problem in found]
        raise PydanticCustomError(
            "several_problems", "{reason}", {"reason": "; ".join(reasons), "reasons": reasons}
        )


def _reasoned(kind: str, check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`check` with its ValueError turned into a validation error whose message is
    the reason alone (pydantic would otherwise prefix "Value error, ")."""

    def run(value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise _problem(kind, str(exc)) from None

    return run


def _as_tuple(value: object) -> object:
    # TOML arrays arrive as lists; the model keeps tuples so a validated policy cannot
    # change, and strict mode would refuse the list.
    return tuple(value) if isinstance(value, list) else value


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{_q(value)} is not a valid name; use 1 to 63 lower-case letters, digits "
            'and hyphens, starting with a letter or digit, such as "github-read"'
        )
    return value


def _check_param_name(value: str) -> str:
    if not PARAM_NAME.fullmatch(value):
        raise ValueError(
            f"{_q(value)} is not a valid param name; use letters, digits and "
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
            f"{_q(value)} is not a valid regular expression ({exc}); values must match it "
            'entirely, so anchors are optional, as in "[A-Za-z0-9-]{1,39}"'
        ) from None
    return value


def _check_port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise ValueError(f"port {value} is out of range; write a port from 1 to 65535, such as 443")
    return value


def _check_method(value: str) -> str:
    if value in _METHODS:
        return value
    upper = value.upper()
    if upper in _METHODS:
        raise ValueError(f"methods are case-sensitive; write {_q(upper)}")
    if upper == "CONNECT":
        raise ValueError(
            "CONNECT is how the proxy opens tunnels, not a method a rule allows; list the "
            'methods sent inside the tunnel, such as "GET"'
        )
    if upper == "TRACE":
        raise ValueError(
            "TRACE is refused because it echoes the request back, injected secrets "
            "included; remove it"
        )
    raise ValueError(f"{_q(value)} is not an allowed method; use {', '.join(_METHODS)}")


def _check_cidr(value: str) -> str:
    try:
        if "%" in value:  # ip_network would drop an IPv6 zone id silently
            raise ValueError(value)
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(
            f"{_q(value)} is not an IP network; write CIDR notation such as "
            '"10.1.2.0/24" or "fd00:1::/64"'
        ) from None
    if network.prefixlen == 0:
        raise ValueError(
            f"{_q(value)} covers every address and would switch the SSRF guard off; "
            'name the private ranges you mean, such as "10.1.2.0/24"'
        )
    return str(network)


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
            f"{_q(value)} is not a valid HTTP header name; use letters, digits and "
            'hyphens, such as "Authorization"'
        )
    if value.lower() in _PROXY_HEADERS:
        raise ValueError(
            f"{_q(value)} is managed by the proxy and cannot carry a secret; inject into "
            'a header such as "Authorization"'
        )
    return value


def _check_duration(value: Any) -> int:
    seconds = parse_duration(value)
    if seconds < 1:
        raise ValueError('a duration must be at least 1 second; write one such as "15m"')
    return seconds


_Name = Annotated[
    str,
    AfterValidator(_reasoned("name", _check_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{_NAME.pattern}$"}),
]
_ParamName = Annotated[
    str,
    AfterValidator(_reasoned("param_name", _check_param_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{PARAM_NAME.pattern}$"}),
]
_Regex = Annotated[str, AfterValidator(_reasoned("regex", _check_regex))]
_HostPattern = Annotated[str, AfterValidator(_reasoned("host", canonical_host_pattern))]
_Port = Annotated[
    int,
    AfterValidator(_reasoned("port", _check_port)),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 65535}),
]
_Method = Annotated[
    str,
    AfterValidator(_reasoned("method", _check_method)),
    WithJsonSchema({"type": "string", "enum": list(_METHODS)}),
]
_PathPattern = Annotated[str, AfterValidator(_reasoned("path", validate_path_pattern))]
_Cidr = Annotated[str, AfterValidator(_reasoned("cidr", _check_cidr))]
_SecretName = Annotated[
    str,
    AfterValidator(_reasoned("secret_name", _check_secret_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{_SECRET_NAME.pattern}$"}),
]
_HeaderName = Annotated[str, AfterValidator(_reasoned("header", _check_header))]

Duration = Annotated[
    int,
    BeforeValidator(_reasoned("duration", _check_duration)),
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

_Hosts = Annotated[tuple[_HostPattern, ...], BeforeValidator(_as_tuple)]
_Ports = Annotated[tuple[_Port, ...], BeforeValidator(_as_tuple)]
_Methods = Annotated[tuple[_Method, ...], BeforeValidator(_as_tuple)]
_Paths = Annotated[tuple[_PathPattern, ...], BeforeValidator(_as_tuple)]
_Cidrs = Annotated[tuple[_Cidr, ...], BeforeValidator(_as_tuple)]
_Tls = Literal["terminate", "passthrough"]


def _require_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    if not hosts:
        raise _problem("hosts_empty", 'list at least one host, such as hosts = ["api.example.com"]')
    return hosts


def _require_ports(ports: tuple[int, ...]) -> tuple[int, ...]:
    if not ports:
        raise _problem("ports_empty", "list at least one port, or leave ports out for [443]")
    return ports


def _tls_shape_problems(
    tls: str, methods: tuple[str, ...], paths: tuple[str, ...]
) -> list[PydanticCustomError]:
    if tls == "passthrough":
        if methods or paths:
            return [
                _problem(
                    "passthrough_filters",
                    "passthrough tunnels are opaque, so the proxy cannot check methods or "
                    'paths; remove methods and paths or use tls = "terminate"',
                )
            ]
        return []
    found = []
    if not methods:
        found.append(
            _problem(
                "methods_missing",
                'methods is missing; list the methods allowed, such as methods = ["GET", "HEAD"]',
            )
        )
    if not paths:
        found.append(
            _problem(
                "paths_missing",
                'paths is missing; list the paths allowed, such as paths = ["/**"] for all of them',
            )
        )
    return found


def _with_raw_problems(data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate, and when some keys fail (so pydantic skips the model validator), also
    report the methods/paths problems that show from the raw table alone, so that one
    run of `policy check` lists them all."""
    try:
        return handler(data)
    except ValidationError as exc:
        tls = data.get("tls", "terminate") if isinstance(data, dict) else None
        if tls not in ("terminate", "passthrough"):
            raise
        assert isinstance(data, dict)
        methods, paths = tuple(data.get("methods") or ()), tuple(data.get("paths") or ())
        seen = {error["type"] for error in exc.errors()}
        extra = [p for p in _tls_shape_problems(tls, methods, paths) if p.type not in seen]
        if not extra:
            raise
        errors: list[InitErrorDetails] = [_again(error) for error in exc.errors()]
        errors += [{"type": problem, "loc": (), "input": data} for problem in extra]
        raise ValidationError.from_exception_data(exc.title, errors) from None


def _again(error: ErrorDetails) -> InitErrorDetails:
    """A reported error in the form that raises it again unchanged."""
    kind = error["type"]
    ctx = dict(error.get("ctx") or {})
    again: InitErrorDetails = {"type": kind, "loc": error["loc"], "input": error["input"]}
    if kind not in PYDANTIC_ERROR_TYPES:
        again["type"] = PydanticCustomError(kind, "{reason}", {**ctx, "reason": error["msg"]})
    elif ctx:
        again["ctx"] = ctx
    return again


# methods and paths are required unless tls = "passthrough", which forbids them; the
# schema says so too, so editors flag a missing one as the loader does.
_FILTERS_BY_TLS: dict[str, Any] = {
    "if": {"properties": {"tls": {"const": "passthrough"}}, "required": ["tls"]},
    "then": {"not": {"anyOf": [{"required": ["methods"]}, {"required": ["paths"]}]}},
    "else": {"required": ["methods", "paths"]},
}


class InjectSpec(_Section):
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
            raise _problem(
                "inject_format",
                'format must contain "{secret}" exactly once, where the secret goes, '
                'such as "Bearer {secret}"',
            )
        rest = value.replace("{secret}", "")
        if "{" in rest or "}" in rest:
            raise _problem(
                "inject_format",
                'format may contain no braces besides "{secret}"; remove the others',
            )
        if any(not (" " <= ch <= "~") for ch in rest):
            raise _problem(
                "inject_format",
                "format becomes a header value, so it may hold only printable ASCII "
                "characters and spaces; remove the others",
            )
        return value


class Capability(_Section):
    """Something an agent may ask for by name: HTTP access to some hosts, methods
    and paths, optionally with a secret the proxy injects, for a limited time."""

    model_config = ConfigDict(json_schema_extra=_FILTERS_BY_TLS)

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _with_raw_problems(data, handler)

    description: str = ""
    """What the capability is for, shown to the agent and to whoever approves it.
    Missing or empty means the capability is listed by name only."""

    params: dict[_ParamName, _Regex] = {}
    """Values the agent fills in, each with the regex the value must fully match
    (anchors are implied); each is used as a whole path segment "{name}" in paths.
    Missing or empty: the capability takes no params."""

    hosts: _Hosts
    """Hosts reachable with this capability; required, at least one. Exact names,
    "*.example.com" for the subdomains of example.com (not example.com itself), or
    canonical IP literals. Written names are lowercased, lose a trailing dot and are
    stored as punycode."""

    ports: _Ports = (443,)
    """Destination ports; missing means [443]."""

    methods: _Methods = ()
    """HTTP methods allowed: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS. Required
    with tls = "terminate"; must be left out with "passthrough", whose tunnels the
    proxy cannot look into."""

    paths: _Paths = ()
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

    allow_private: _Cidrs = ()
    """Private or otherwise guarded address ranges (CIDR) these hosts may resolve to,
    despite the SSRF guard. Missing or empty: none; use only for hosts you run."""

    tls: _Tls = "terminate"
    """"terminate" (missing means this) lets the proxy see and check each request and
    inject the secret; "passthrough" is an opaque tunnel that never carries a secret."""

    @field_validator("hosts")
    @classmethod
    def _hosts_present(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return _require_hosts(hosts)

    @field_validator("ports")
    @classmethod
    def _ports_present(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        return _require_ports(ports)

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
                    raise _problem(
                        "undeclared_param",
                        f"{_q(pattern)} uses {{{name}}}, which params does not declare; "
                        f'add {name} = "<regex>" to params or take it out of the path',
                    )
        return paths

    @field_validator("max_ttl")
    @classmethod
    def _max_ttl_bounded(cls, max_ttl: int) -> int:
        if max_ttl > _MAX_GRANT_S:
            raise _problem(
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
                _problem(
                    "passthrough_secret",
                    "passthrough tunnels are opaque and never carry injected secrets; remove "
                    'secret/inject or use tls = "terminate"',
                )
            )
        if self.secret is not None and self.inject is None:
            found.append(
                _problem(
                    "secret_without_inject",
                    "secret is set but inject is missing; add inject = { header = "
                    '"Authorization", format = "Bearer {secret}" } or remove secret',
                )
            )
        if self.inject is not None and self.secret is None:
            found.append(
                _problem(
                    "inject_without_secret",
                    'inject is set but secret is missing; add secret = "<vault entry name>" '
                    "or remove inject",
                )
            )
        found += _tls_shape_problems(self.tls, self.methods, self.paths)
        used = {name for pattern in self.paths for name in path_placeholders(pattern)}
        found += [
            _problem(
                "unused_param",
                f"param {_q(name)} is declared but no path uses {{{name}}}, so its "
                "value would limit nothing; use it in a path or remove it",
            )
            for name in self.params
            if name not in used
        ]
        if self.ttl > self.max_ttl:
            found.append(
                _problem(
                    "ttl_above_max",
                    f"ttl ({format_duration(self.ttl)}) is longer than max_ttl "
                    f"({format_duration(self.max_ttl)}); shorten ttl or raise max_ttl",
                )
            )
        _all_problems(found)
        return self


class EgressRule(_Section):
    """Traffic every run may send without asking for a capability."""

    model_config = ConfigDict(json_schema_extra=_FILTERS_BY_TLS)

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _with_raw_problems(data, handler)

    name: _Name
    """Name of the rule, shown in the egress log and in denials; required and unique."""

    hosts: _Hosts
    """Hosts this rule allows; required, at least one. Exact names, "*.example.com"
    for the subdomains of example.com (not example.com itself), or canonical IP literals."""

    ports: _Ports = (443,)
    """Destination ports; missing means [443]."""

    methods: _Methods = ()
    """HTTP methods allowed: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS. Required
    with tls = "terminate"; must be left out with "passthrough"."""

    paths: _Paths = ()
    """Path patterns allowed: "*" is one segment, "**" any number of segments; rules
    take no params. Required with tls = "terminate"; must be left out with "passthrough"."""

    tls: _Tls = "terminate"
    """"terminate" (missing means this) lets the proxy see and check each request;
    "passthrough" is an opaque tunnel checked by host and port only."""

    allow_private: _Cidrs = ()
    """Private or otherwise guarded address ranges (CIDR) these hosts may resolve to,
    despite the SSRF guard. Missing or empty: none; use only for hosts you run."""

    @field_validator("hosts")
    @classmethod
    def _hosts_present(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return _require_hosts(hosts)

    @field_validator("ports")
    @classmethod
    def _ports_present(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        return _require_ports(ports)

    @field_validator("paths")
    @classmethod
    def _no_placeholders(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in paths:
            if path_placeholders(pattern):
                raise _problem(
                    "rule_placeholder",
                    f"{_q(pattern)} has a placeholder, but egress rules take no params; "
                    'write the segment itself, or "*" for any one segment',
                )
        return paths

    @model_validator(mode="after")
    def _parts_agree(self) -> EgressRule:
        _all_problems(_tls_shape_problems(self.tls, self.methods, self.paths))
        return self


class EgressLimits(_Section):
    """Caps on the network traffic of one run."""

    max_requests: int = Field(default=1000, gt=0)
    """Most requests one run may make through the proxy: each request, each tunnel
    (CONNECT) and each refusal counts, so a run cannot flood the proxy with denials."""

    max_request_bytes: int = Field(default=10 * _MIB, gt=0)
    """Total bytes one run may send upstream, headers and bodies."""

    max_response_bytes: int = Field(default=100 * _MIB, gt=0)
    """Total bytes one run may receive from upstream, headers and bodies."""

    max_connections: int = Field(default=16, gt=0)
    """Most connections (tunnels) to the proxy one run may hold open at once."""


class EgressSettings(_Section):
    """Network access every run gets without a capability, and per-run caps."""

    allow: Annotated[tuple[EgressRule, ...], BeforeValidator(_as_tuple)] = ()
    """Allow rules, written as [[egress.allow]] tables. Missing or empty: runs reach
    nothing but what granted capabilities allow."""

    limits: EgressLimits = EgressLimits()
    """Per-run caps on requests, bytes and connections."""

    upstream_ca_file: str | None = Field(default=None, min_length=1)
    """Extra PEM bundle the proxy trusts when it verifies upstream TLS (a private CA).
    Missing: only the system's trust store."""

    @field_validator("allow")
    @classmethod
    def _names_unique(cls, rules: tuple[EgressRule, ...]) -> tuple[EgressRule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:
                raise _problem(
                    "duplicate_rule",
                    f"two rules are named {_q(rule.name)}; give each rule its own name",
                )
            seen.add(rule.name)
        return rules


class BrokerSettings(_Section):
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


class TenantLimits(_Section):
    """Caps per tenant (over HTTP each API key or JWT names one; over stdio there is one)."""

    max_concurrent_runs: int = Field(default=32, gt=0, le=1024)
    """Most runs (and so run containers) one tenant may have at once; one more is refused."""

    max_live_sessions: int = Field(default=64, gt=0, le=100000)
    """Most sessions one tenant may have live at once (each keeps a workspace on the host's
    disk until it ends); one more is refused until one ends or expires."""


def _check_root(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError(
            f"{_q(value)} is relative; a hatch root is an absolute host path, such as "
            '"/srv/repos/app"'
        )
    if os.path.normpath(value) != value or value.startswith("//"):
        raise ValueError(f"{_q(value)} is not in normal form; write {_q(os.path.normpath(value))}")
    if value == "/":
        raise ValueError('"/" would offer the whole host; name the repository directory itself')
    if not os.path.isdir(value):
        raise ValueError(
            f"{_q(value)} is not an existing directory on this host; create it or fix the path"
        )
    real = os.path.realpath(value)
    if real != value:
        # The root is the boundary the snapshot never leaves, so it is named as it is;
        # a symlink in it could be repointed after the policy was checked.
        raise ValueError(f"{_q(value)} passes through a symlink; write the real path {_q(real)}")
    return value


_RootPath = Annotated[str, AfterValidator(_reasoned("hatch_root", _check_root))]
_Glob = Annotated[str, AfterValidator(_reasoned("glob", validate_glob))]


class HatchSettings(_Section):
    """Host directories an agent may have copied into its session, and what may come back
    from them as a patch."""

    roots: dict[_Name, _RootPath] = {}
    """Directories an agent may ask for by name ([hatch.roots] table: name = absolute
    path). Each must exist, be a directory and be written as its real path (no symlinks).
    The server copies a snapshot in; nothing is ever mounted. Missing or empty: there is
    nothing to copy, and every copy_in call is refused."""

    protected: Annotated[tuple[_Glob, ...], BeforeValidator(_as_tuple)] = DEFAULT_PROTECTED
    """Globs of paths (from the root) a patch never carries; changes to them are listed as
    needing a human. "**" is any number of segments, "*" and "?" match within one; a path
    is read as Windows and macOS read it (case, trailing dots and spaces and ":" data
    streams ignored), and a Windows short name such as GITHUB~1 counts as matching.
    Missing means CI and deploy configuration, code owners, submodules, .env files,
    registry settings, and files editors, hook managers and coding agents run on their
    own. Writing it replaces that list, so keep its entries unless you mean to let agents'
    patches change them."""

    exclude: Annotated[tuple[_Glob, ...], BeforeValidator(_as_tuple)] = DEFAULT_EXCLUDED
    """Globs of paths (from the root) a copy never takes into the sandbox, listed as
    skipped: files that hold credentials, since a sandbox holds no secret. Matched as
    `protected` is, except that a short name stands only for itself. Missing means .env
    files, package registries', git, database, cluster and cloud credentials (service
    account keys included), SSH keys, keys and certificates. Writing it replaces that
    list."""

    ignore: Annotated[tuple[_Glob, ...], BeforeValidator(_as_tuple)] = DEFAULT_IGNORED
    """Globs of new files (absent from the copy) a patch leaves out and only counts:
    caches and build output. Missing means Python caches and node_modules; files the
    copy brought in are never ignored, whatever their name."""

    max_files: int = Field(default=5000, gt=0, le=100_000)
    """Most files and directories one copy_in may take from a root; more is refused,
    naming this cap."""

    max_bytes: int = Field(default=64 * _MIB, gt=0)
    """Total size in bytes of the files one copy_in may take; more is refused."""

    max_patch_mb: int = Field(default=256, gt=0, le=4096)
    """Largest patch get_patch writes, in MiB (binary files count about 1.3 times their
    deflated size); a larger one is refused, naming this cap, and nothing is kept."""

    include_git_dir_read_only: bool = False
    """Copy nested `.git` directories too. They hold history and may hold credentials
    (remote URLs, hooks), so missing means false: they are skipped. The root's own `.git`
    is never copied: the copy gets a fresh repository of its own instead. Either way no
    change under a `.git` directory ever leaves in a patch."""

    def protecting_glob(self, path: str) -> str | None:
        """The glob of `protected` that holds the root-relative `path` back, or None."""
        return protecting_glob(self.protected, path)

    def ignores(self, path: str) -> bool:
        """Whether a new file at the root-relative `path` stays out of patches."""
        return matching_glob(self.ignore, path) is not None


class ImageSettings(_Section):
    """What the image Airlock builds holds beyond its defaults. Ignored when [sandbox]
    image names another image."""

    python_lock: str | None = None
    """Absolute path of a Python lock file that replaces the default one (numpy, pandas,
    matplotlib, scipy, ...); `airlock image lock REQUIREMENTS` writes one. Every entry is
    name==version with a --hash=sha256; the build refuses anything else. Missing means the
    default lock."""

    debian_packages: Annotated[tuple[str, ...], BeforeValidator(_as_tuple)] = ()
    """Debian bookworm packages added to the image, such as ["ffmpeg", "graphviz"]. Missing
    or empty: only the default tools. With `base`, the base must hold them (the build checks)."""

    base: str | None = Field(default=None, min_length=1)
    """Image reference of the Debian base the image is built on, such as the
    "registry:5000/airlock-base@sha256:..." that `airlock image push --base` prints: pulled
    when the engine lacks it, so the build needs neither root nor debootstrap. Missing means
    a base bootstrapped here with debootstrap (as root, once)."""

    @field_validator("base")
    @classmethod
    def _base_reference(cls, value: str | None) -> str | None:
        return _reference(value)

    @field_validator("python_lock")
    @classmethod
    def _lock_path_absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise _problem(
                "lock_path_relative",
                f"python_lock {_q(value)} is relative; write the absolute path of the lock file",
            )
        return value

    @field_validator("debian_packages")
    @classmethod
    def _package_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _DEBIAN_PACKAGE.fullmatch(name):
                raise _problem(
                    "debian_package",
                    f"{_q(name)} is not a Debian package name: lower-case letters, digits "
                    'and + - . only, such as "graphviz"',
                )
        return names


class TaskSettings(_Section):
    """When a tool call becomes an MCP task (io.modelcontextprotocol/tasks), and how long
    a task is kept."""

    answer_within_s: float = Field(default=5.0, gt=0, le=600)
    """Seconds run_code, get_patch, copy_in and browse may take before a caller that
    declared the Tasks extension gets a task handle to poll instead of the result."""

    ttl_s: int = Field(default=3600, gt=0, le=30 * 86400)
    """Seconds a task's outcome is kept after it ends (tasks/get answers it until then)."""

    poll_interval_ms: int = Field(default=2000, ge=100, le=60000)
    """How often a client is asked to poll a task (pollIntervalMs)."""


class Policy(_Section):
    """A complete Airlock policy. Every section may be left out to take its defaults."""

    version: Literal[1] = 1
    """Version of the policy format; only 1 exists."""

    sandbox: SandboxSettings = SandboxSettings()
    """Image and runtime of sandboxes."""

    image: ImageSettings = ImageSettings()
    """Python lock file, extra Debian packages and base of the image Airlock builds."""

    tenants: TenantLimits = TenantLimits()
    """Per-tenant caps."""

    limits: Limits = Limits()
    """Resource limits of each run."""

    output: OutputLimits = OutputLimits()
    """Caps on stdout and stderr."""

    files: FileLimits = FileLimits()
    """Caps on input files and artifacts."""

    sessions: SessionSettings = SessionSettings()
    """Idle and total lifetime of session leases."""

    tasks: TaskSettings = TaskSettings()
    """When a long tool call becomes an MCP task, and how long a task is kept."""

    pool: PoolSettings = PoolSettings()
    """Warm pool of containers."""

    browser: BrowserSettings = BrowserSettings()
    """Limits of the browser box (`browse`); missing means the defaults."""

    capabilities: dict[_Name, Capability] = {}
    """Capabilities agents may ask for, by name ([capabilities.NAME] tables; names are
    lower-case letters, digits and hyphens). Missing or empty: there is nothing to
    ask for, and every request_capability call is refused."""

    egress: EgressSettings = EgressSettings()
    """Allow rules every run gets, and per-run traffic caps."""

    broker: BrokerSettings = BrokerSettings()
    """Caps on live capability grants."""

    hatch: HatchSettings = HatchSettings()
    """Repositories agents may have copied in, and paths their patches may not touch."""

    console: ConsoleSettings = ConsoleSettings()
    """The operator console's sign-in (the server's policy only)."""

"""The parts an egress rule and a capability are both made of: hosts, ports, methods, path
patterns, private address ranges and the TLS mode, each checked with a reason; and the
rule that methods and paths come with tls = "terminate" and never with "passthrough",
checked on the raw table too so that one `policy check` lists every problem (`TrafficRule`,
the base of both). Not here: the rule and the capability themselves (`egress.py`,
`capability.py`)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from airlock.policies.capabilities import validate_path_pattern
from airlock.policies.hosts import canonical_host_pattern
from airlock.validation import PYDANTIC_ERROR_TYPES

from .section import Section, as_tuple, problem, quoted, reasoned

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _check_port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise ValueError(f"port {value} is out of range; write a port from 1 to 65535, such as 443")
    return value


def _check_method(value: str) -> str:
    if value in _METHODS:
        return value
    upper = value.upper()
    if upper in _METHODS:
        raise ValueError(f"methods are case-sensitive; write {quoted(upper)}")
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
    raise ValueError(f"{quoted(value)} is not an allowed method; use {', '.join(_METHODS)}")


def _check_cidr(value: str) -> str:
    try:
        if "%" in value:  # ip_network would drop an IPv6 zone id silently
            raise ValueError(value)
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(
            f"{quoted(value)} is not an IP network; write CIDR notation such as "
            '"10.1.2.0/24" or "fd00:1::/64"'
        ) from None
    if network.prefixlen == 0:
        raise ValueError(
            f"{quoted(value)} covers every address and would switch the SSRF guard off; "
            'name the private ranges you mean, such as "10.1.2.0/24"'
        )
    return str(network)


_HostPattern = Annotated[str, AfterValidator(reasoned("host", canonical_host_pattern))]
_Port = Annotated[
    int,
    AfterValidator(reasoned("port", _check_port)),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 65535}),
]
_Method = Annotated[
    str,
    AfterValidator(reasoned("method", _check_method)),
    WithJsonSchema({"type": "string", "enum": list(_METHODS)}),
]
_PathPattern = Annotated[str, AfterValidator(reasoned("path", validate_path_pattern))]
_Cidr = Annotated[str, AfterValidator(reasoned("cidr", _check_cidr))]


Hosts = Annotated[tuple[_HostPattern, ...], BeforeValidator(as_tuple)]
Ports = Annotated[tuple[_Port, ...], BeforeValidator(as_tuple)]
Methods = Annotated[tuple[_Method, ...], BeforeValidator(as_tuple)]
Paths = Annotated[tuple[_PathPattern, ...], BeforeValidator(as_tuple)]
Cidrs = Annotated[tuple[_Cidr, ...], BeforeValidator(as_tuple)]
Tls = Literal["terminate", "passthrough"]


def _require_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    if not hosts:
        raise problem("hosts_empty", 'list at least one host, such as hosts = ["api.example.com"]')
    return hosts


def _require_ports(ports: tuple[int, ...]) -> tuple[int, ...]:
    if not ports:
        raise problem("ports_empty", "list at least one port, or leave ports out for [443]")
    return ports


def tls_shape_problems(
    tls: str, methods: tuple[str, ...], paths: tuple[str, ...]
) -> list[PydanticCustomError]:
    if tls == "passthrough":
        if methods or paths:
            return [
                problem(
                    "passthrough_filters",
                    "passthrough tunnels are opaque, so the proxy cannot check methods or "
                    'paths; remove methods and paths or use tls = "terminate"',
                )
            ]
        return []
    found = []
    if not methods:
        found.append(
            problem(
                "methods_missing",
                'methods is missing; list the methods allowed, such as methods = ["GET", "HEAD"]',
            )
        )
    if not paths:
        found.append(
            problem(
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
        extra = [p for p in tls_shape_problems(tls, methods, paths) if p.type not in seen]
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


class TrafficRule(Section):
    """The checks an egress rule and a capability share: at least one host and one port,
    methods and paths as the TLS mode wants them (in the schema too), and every problem of
    a table reported at once. The fields are each subclass's own, in its order and words."""

    model_config = ConfigDict(json_schema_extra=_FILTERS_BY_TLS)

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _with_raw_problems(data, handler)

    # check_fields=False: the fields are declared by the subclasses.
    @field_validator("hosts", check_fields=False)
    @classmethod
    def _hosts_present(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return _require_hosts(hosts)

    @field_validator("ports", check_fields=False)
    @classmethod
    def _ports_present(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        return _require_ports(ports)

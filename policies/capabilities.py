"""Capability scopes: durations, path patterns, and a capability's scope for given params.

Pure helpers used by the policy model (to validate what an operator writes) and by
the broker and proxy (to resolve and match what an agent asks for). Nothing here
knows about grants, clocks, tokens or requests on the wire: path matching takes a
path the proxy has already normalized (percent-decoded, dot segments refused,
query removed).

Path patterns are `/`-separated segments. A segment `*` matches exactly one
non-empty segment, `**` matches zero or more segments (at the end or in the
middle), `{name}` is replaced by the value of param `name`, and any other segment
matches itself exactly, case-sensitively.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""What a param name looks like (also inside `{...}` in a path pattern)."""

MAX_PARAM_VALUE = 256
"""Longest param value, in characters, `resolve_scope` accepts."""

_PLACEHOLDER = re.compile(r"\{([^{}/]*)\}")
_DURATION = re.compile(
    r"(?:(?P<d>[0-9]{1,9})d)?(?:(?P<h>[0-9]{1,9})h)?(?:(?P<m>[0-9]{1,9})m)?(?:(?P<s>[0-9]{1,9})s)?"
)
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
# Characters that would let a param value reach past its own path segment, or be
# read differently by the proxy's matcher and the upstream server.
_FORBIDDEN_IN_VALUE = {
    "/": "a slash",
    "?": "a question mark",
    "#": "a hash sign",
    "%": "a percent sign",
    "*": "an asterisk",
    "\\": "a backslash",
}


_Entry = Annotated[str, Field(min_length=1)]
_Port = Annotated[int, Field(ge=1, le=65535)]


class Scope(BaseModel):
    """What one grant of a capability lets a run reach, with its params filled in.

    The one shape of a capability's scope: `resolve_scope` makes it once per request, the
    broker's grant keeps it, the proxy's rule for the grant is built from it, the agent is
    shown it and the store records it as JSON. Every field holds at least one entry: "any"
    is spelled "*" (methods) and "/**" (paths), never by leaving a field empty.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    hosts: tuple[_Entry, ...] = Field(min_length=1)
    """Canonical host patterns (see `policies.hosts.host_matches`)."""

    ports: tuple[_Port, ...] = Field(min_length=1)
    """Destination ports."""

    methods: tuple[_Entry, ...] = Field(min_length=1)
    """HTTP methods; "*" (any) for a passthrough capability, whose requests are not seen."""

    paths: tuple[_Entry, ...] = Field(min_length=1)
    """Path patterns with every `{param}` replaced (see `path_matches`); "/**" (any) for a
    passthrough capability."""


def parse_duration(text: str | int) -> int:
    """Seconds in a duration such as "30s", "15m", "1h", "2h30m" or "1d", or an int.

    Units are d, h, m and s, each at most once and largest first. An int is taken as
    seconds. Raises ValueError (one sentence) for anything else, including negative
    numbers and booleans.
    """
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(
            'a duration is a string such as "15m" or "2h30m", or a whole number of seconds'
        )
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a duration cannot be negative ({text}); write seconds as 0 or more")
        return text
    found = _DURATION.fullmatch(text)
    if not text or found is None:
        hint = f'; write "{text}s" for seconds' if text.isdigit() else ""
        raise ValueError(
            f"{_q(text)} is not a duration; write numbers with the units d, h, m or s, "
            f'largest first, such as "30s", "15m", "2h30m" or "1d"{hint}'
        )
    return sum(int(found[unit] or 0) * size for unit, size in _UNITS)


def format_duration(seconds: int) -> str:
    """`seconds` written the way `parse_duration` reads it, such as "2h30m"."""
    parts = []
    rest = seconds
    for unit, size in _UNITS:
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


def validate_path_pattern(pattern: str) -> str:
    """`pattern` unchanged if it is a valid path pattern; else ValueError saying why.

    A pattern starts with "/", has no query or fragment, no percent-escapes (the
    proxy matches decoded paths), no "." or ".." segments, and uses `*`, `**` and
    `{name}` only as whole segments.
    """
    if not pattern.startswith("/"):
        raise ValueError(f'{_q(pattern)} must start with "/"; write {_q("/" + pattern)}')
    if "?" in pattern or "#" in pattern:
        raise ValueError(
            f"{_q(pattern)} has a query or fragment; patterns match the path only, "
            'so remove everything from "?" or "#" on'
        )
    if "%" in pattern:
        raise ValueError(
            f"{_q(pattern)} has a percent-escape; the proxy matches decoded paths, "
            "so write the character itself"
        )
    if "\\" in pattern or any(ch.isspace() or not ch.isprintable() for ch in pattern):
        raise ValueError(
            f"{_q(pattern)} contains a backslash, space or control character; remove it"
        )
    for segment in pattern.split("/")[1:]:
        if segment in (".", ".."):
            raise ValueError(
                f'{_q(pattern)} has a "{segment}" segment; write the path it leads to instead'
            )
        if "*" in segment and segment not in ("*", "**"):
            raise ValueError(
                f'{_q(pattern)} has a partial wildcard {_q(segment)}; "*" (one segment) '
                'and "**" (any number of segments) must be whole segments, as in "/a/*/b"'
            )
        if ("{" in segment or "}" in segment) and not _placeholder(segment):
            raise ValueError(
                f"{_q(pattern)} has {_q(segment)}; a placeholder is a whole segment "
                'naming a param, as in "/repos/{org}/issues"'
            )
    return pattern


def path_placeholders(pattern: str) -> tuple[str, ...]:
    """The param names used as `{name}` segments in a valid path pattern, in order."""
    names = (_placeholder(segment) for segment in pattern.split("/")[1:])
    return tuple(name for name in names if name)


def path_matches(pattern: str, path: str) -> bool:
    """Whether the normalized request `path` falls under path `pattern`.

    `*` matches exactly one non-empty segment, `**` zero or more segments (empty
    ones included), anything else the identical segment. The caller normalizes
    first: percent-decoding, refusing dot segments and dropping the query are the
    proxy's job, and this function compares exactly what it is given.
    """
    if not pattern.startswith("/") or not path.startswith("/"):
        return False
    segments = path.split("/")[1:]
    # Positions in `segments` reachable after matching each pattern segment; a set
    # keeps "**" linear instead of backtracking.
    reachable = {0}
    for wanted in pattern.split("/")[1:]:
        if wanted == "**":
            reachable = set(range(min(reachable), len(segments) + 1))
            continue
        reachable = {
            i + 1
            for i in reachable
            if i < len(segments) and (segments[i] != "" if wanted == "*" else segments[i] == wanted)
        }
        if not reachable:
            return False
    return len(segments) in reachable


class ScopeSource(Protocol):
    """What `resolve_scope` reads of a capability (a `policies.model.capability.Capability`).

    A protocol, so that this module, which the model imports for its validators, does
    not import the model back.
    """

    @property
    def params(self) -> Mapping[str, str]: ...
    @property
    def hosts(self) -> tuple[str, ...]: ...
    @property
    def ports(self) -> tuple[int, ...]: ...
    @property
    def methods(self) -> tuple[str, ...]: ...
    @property
    def paths(self) -> tuple[str, ...]: ...
    @property
    def tls(self) -> str: ...


def resolve_scope(cap: ScopeSource, params: Mapping[str, str]) -> Scope:
    """The scope of `cap` with `params` filled into its path patterns; a passthrough
    capability's tunnels are decided on host and port alone, so its scope is any method
    and any path.

    Raises ValueError (one sentence an agent can act on) when a param is missing or
    not declared by the capability, when a value is empty, longer than
    MAX_PARAM_VALUE, "." or "..", contains "/", "?", "#", "%", "*", "\\", whitespace
    or control characters, or does not fully match the param's regex.
    """
    declared = cap.params
    for name in sorted(params):
        if name not in declared:
            takes = ", ".join(_q(n) for n in declared) if declared else "none"
            raise ValueError(
                f"{_q(name)} is not a param of this capability; the params it takes are: {takes}"
            )
    values: dict[str, str] = {}
    for name, regex in declared.items():
        if name not in params:
            raise ValueError(f"param {_q(name)} is missing; give a value matching {regex}")
        values[name] = _checked_value(name, regex, params[name])
    if cap.tls == "passthrough":
        return Scope(hosts=cap.hosts, ports=cap.ports, methods=("*",), paths=("/**",))
    paths = tuple(_substitute(pattern, values) for pattern in cap.paths)
    return Scope(hosts=cap.hosts, ports=cap.ports, methods=cap.methods, paths=paths)


def _checked_value(name: str, regex: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"param {_q(name)} must be a string")
    if not value:
        raise ValueError(f"param {_q(name)} is empty; give a value matching {regex}")
    if len(value) > MAX_PARAM_VALUE:
        raise ValueError(
            f"param {_q(name)} is longer than {MAX_PARAM_VALUE} characters; give a shorter value"
        )
    if value in (".", ".."):
        raise ValueError(f'param {_q(name)} cannot be "." or ".."; give a name')
    for char, called in _FORBIDDEN_IN_VALUE.items():
        if char in value:
            raise ValueError(
                f"param {_q(name)} contains {called} ({_q(char)}), which a param value may "
                "not; give a single path segment"
            )
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(f"param {_q(name)} contains whitespace or control characters; remove them")
    if re.fullmatch(regex, value) is None:
        raise ValueError(
            f"param {_q(name)} does not match {regex}; give a value that matches it entirely"
        )
    return value


def _substitute(pattern: str, values: Mapping[str, str]) -> str:
    # Placeholders are whole segments (validated with the policy), so replacing
    # segment by segment cannot splice a value into a literal.
    segments = []
    for segment in pattern.split("/"):
        name = _placeholder(segment)
        if name is not None and name not in values:
            raise ValueError(f"path pattern {_q(pattern)} uses an undeclared param {_q(name)}")
        segments.append(segment if name is None else values[name])
    return "/".join(segments)


def _placeholder(segment: str) -> str | None:
    """The param name if `segment` is exactly `{name}` with a valid name, else None."""
    found = _PLACEHOLDER.fullmatch(segment)
    if found is None or not PARAM_NAME.fullmatch(found[1]):
        return None
    return found[1]


def _q(text: str) -> str:
    """`text` in double quotes, as TOML and JSON write strings, for messages."""
    return json.dumps(text, ensure_ascii=False)

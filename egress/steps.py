"""What a proxy conversation is told and what it asks for: events in, actions out.

Belongs here: the frozen values that cross the seam between `egress.conversation` (which
decides) and `egress.proxy`'s loop (which performs): events (bytes arrived, TLS started,
a secret found, a name resolved, an upstream dialled, a cut) and actions (send, start TLS,
look up, resolve, dial, pool or close the upstream, keep a record, close). Nothing here
does anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Literal

from airlock.broker import Secret
from airlock.store import EgressRecord, EgressVerdict

IPAddress = IPv4Address | IPv6Address
PoolKey = tuple[str, str, int, tuple[str, ...]]
"""(scheme, host, port, allow_private): upstream connections are reused only under the
same key, so one dialled under a wider address allowance never serves a narrower rule."""


@dataclass(frozen=True)
class ClientData:
    data: bytes


@dataclass(frozen=True)
class ClientClosed:
    pass


@dataclass(frozen=True)
class TLSStarted:
    sni: str | None


@dataclass(frozen=True)
class TLSFailed:
    reason: str


@dataclass(frozen=True)
class SecretFound:
    """The vault's answer: the value and the hosts it may go to, or None when absent."""

    value: Secret | None
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reused:
    """An idle upstream connection of this run, under the same key, was taken."""

    address: str


@dataclass(frozen=True)
class Resolved:
    addresses: tuple[IPAddress, ...]


@dataclass(frozen=True)
class ResolveFailed:
    reason: str


@dataclass(frozen=True)
class Dialed:
    address: str


@dataclass(frozen=True)
class DialFailed:
    reason: str


@dataclass(frozen=True)
class UpstreamData:
    data: bytes


@dataclass(frozen=True)
class UpstreamClosed:
    pass


@dataclass(frozen=True)
class Cut:
    """The loop ends the connection from outside: a revoked grant, the run's end, a
    failure of the loop itself ("error")."""

    reason: str
    verdict: EgressVerdict = "deny"


Event = (
    ClientData
    | ClientClosed
    | TLSStarted
    | TLSFailed
    | SecretFound
    | Reused
    | Resolved
    | ResolveFailed
    | Dialed
    | DialFailed
    | UpstreamData
    | UpstreamClosed
    | Cut
)


@dataclass(frozen=True)
class SendClient:
    data: bytes


@dataclass(frozen=True)
class StartTLS:
    """Terminate TLS with the sandbox as `host`, `leftover` being bytes already read."""

    host: str
    leftover: bytes


@dataclass(frozen=True)
class LookupSecret:
    name: str


@dataclass(frozen=True)
class Resolve:
    """Take an idle upstream under `key` (unless `fresh`), else resolve host and port."""

    host: str
    port: int
    key: PoolKey | None
    fresh: bool = False


@dataclass(frozen=True)
class Dial:
    """Connect to `address` (already checked), with TLS verified as `host` when `tls`."""

    address: str
    host: str
    port: int
    tls: bool


@dataclass(frozen=True)
class SendUpstream:
    data: bytes


@dataclass(frozen=True)
class ReleaseUpstream:
    """The upstream is idle and reusable: keep it for this run under `key`."""

    key: PoolKey


@dataclass(frozen=True)
class CloseUpstream:
    pass


@dataclass(frozen=True)
class Record:
    record: EgressRecord
    past_limit: bool


@dataclass(frozen=True)
class Close:
    pass


Action = (
    SendClient
    | StartTLS
    | LookupSecret
    | Resolve
    | Dial
    | SendUpstream
    | ReleaseUpstream
    | CloseUpstream
    | Record
    | Close
)

Need = Literal["client", "upstream", "splice", "wait", "done"]
"""What the loop reads next: the sandbox, the upstream, both (a passthrough tunnel),
nothing until the actions just returned are answered, or nothing ever again."""

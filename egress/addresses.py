"""The SSRF guard: which resolved addresses the proxy may dial.

Belongs here: the table of denied networks, unwrapping IPv6 forms that embed an IPv4
address, the operator's explicit exceptions (`allow_private` CIDRs) and the rule that
every address a name resolves to must pass. Does not belong here: resolving names
(the caller resolves once and passes the addresses in, then dials exactly the address
returned here), sockets, logging, or matching host names against policy.

Python's `is_global` / `is_private` are not enough on their own: their lists change
between patch releases and they call multicast global, so the table below is explicit
and `is_global` is only a backstop for ranges the table does not name.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_network,
)
from typing import TypeAlias

IPAddress: TypeAlias = IPv4Address | IPv6Address

# Order matters only for the wording: the first network containing an address names it,
# so specific entries (metadata, broadcast) come before the ranges that contain them.
_DENIED_V4: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(net), what)
    for net, what in (
        ("169.254.169.254/32", "the cloud metadata endpoint"),
        ("255.255.255.255/32", "the broadcast address"),
        ("0.0.0.0/8", "a 'this network' address"),
        ("10.0.0.0/8", "a private address"),
        ("100.64.0.0/10", "a carrier-grade NAT (shared) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local address"),
        ("172.16.0.0/12", "a private address"),
        ("192.0.0.0/24", "an IETF protocol assignment address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.88.99.0/24", "a 6to4 relay anycast address"),
        ("192.168.0.0/16", "a private address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
    )
)

# Ranges that embed an IPv4 address (mapped, NAT64, 6to4, Teredo, IPv4-compatible) are
# handled in code before this table, because their reason depends on the embedded address.
_DENIED_V6: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(net), what)
    for net, what in (
        ("::/128", "the unspecified address"),
        ("::1/128", "the loopback address"),
        ("fd00:ec2::254/128", "the cloud metadata endpoint"),
        ("100::/64", "a discard-only address"),
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
        ("fc00::/7", "a unique-local (private) address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a deprecated site-local address"),
        ("ff00::/8", "a multicast address"),
    )
)

_IPV4_COMPATIBLE = IPv6Network("::/96")
_NAT64 = (IPv6Network("64:ff9b::/96"), IPv6Network("64:ff9b:1::/48"))
_TEREDO = IPv6Network("2001::/32")
_SIXTOFOUR = IPv6Network("2002::/16")


def _unscoped(ip: IPAddress) -> IPAddress:
    # A zone id (fe80::1%eth0) changes equality but not what is dialed; compare without it.
    if isinstance(ip, IPv6Address) and ip.scope_id is not None:
        return IPv6Address(int(ip))
    return ip


def _v4_class(ip: IPv4Address) -> str | None:
    # The kind of forbidden address and its range, without the address itself.
    for net, what in _DENIED_V4:
        if ip in net:
            return f"{what} ({net})"
    if not ip.is_global:
        return "not a globally routable address"
    return None


def _embedding(embedded: IPv4Address | None) -> str:
    if embedded is None:
        return ""
    what = _v4_class(embedded)
    return f" embedding {embedded}" + (f", which is {what}" if what else "")


def _v6_reason(ip: IPv6Address) -> str | None:
    mapped = ip.ipv4_mapped
    if mapped is not None:
        # Dialing ::ffff:a.b.c.d dials a.b.c.d, so the embedded address decides alone.
        what = _v4_class(mapped)
        return None if what is None else f"{ip} is IPv4-mapped {mapped}, which is {what}"
    for net in _NAT64:
        if ip in net:
            # A NAT64 translator would reach an IPv4 address the operator never chose,
            # so these are refused whatever they embed; the embedded one is named to help.
            embedded = IPv4Address(int(ip) & 0xFFFFFFFF)
            return f"{ip} is a NAT64 address ({net}){_embedding(embedded)}"
    if ip in _SIXTOFOUR:
        return f"{ip} is a 6to4 address ({_SIXTOFOUR}){_embedding(ip.sixtofour)}"
    if ip in _TEREDO:
        return f"{ip} is a Teredo tunnel address ({_TEREDO})"
    for net, what in _DENIED_V6:
        if ip in net:
            return f"{ip} is {what} ({net})"
    if ip in _IPV4_COMPATIBLE:
        # After :: and ::1 above; everything else in ::/96 is the deprecated ::a.b.c.d form.
        return f"{ip} is a deprecated IPv4-compatible address ({_IPV4_COMPATIBLE})"
    if not ip.is_global:
        return f"{ip} is not a globally routable address"
    return None


def forbidden_reason(ip: IPAddress) -> str | None:
    """Say why `ip` must not be dialed, or return None when it is an ordinary public address.

    The reason is one sentence naming the address and the denied range, for example
    "10.0.0.1 is a private address (10.0.0.0/8)".
    """
    ip = _unscoped(ip)
    if isinstance(ip, IPv4Address):
        what = _v4_class(ip)
        return None if what is None else f"{ip} is {what}"
    return _v6_reason(ip)


def _networks(cidrs: Sequence[str]) -> list[IPv4Network | IPv6Network]:
    networks: list[IPv4Network | IPv6Network] = []
    for cidr in cidrs:
        try:
            networks.append(ip_network(cidr, strict=False))
        except ValueError:
            # Policies validate their CIDRs at load time; one that slips through
            # permits nothing rather than failing the whole decision open.
            continue
    return networks


def permitted(ip: IPAddress, allow_private: Sequence[str]) -> bool:
    """True when `ip` is not forbidden, or lies inside one of the operator's CIDRs.

    An IPv4-mapped IPv6 address is also permitted when its IPv4 address lies inside
    one of the CIDRs, since dialing it reaches exactly that IPv4 address. Other
    embedding forms (NAT64, 6to4, Teredo) are permitted only by a CIDR that names the
    IPv6 address itself. A CIDR that does not parse permits nothing.
    """
    ip = _unscoped(ip)
    if forbidden_reason(ip) is None:
        return True
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        candidates.append(ip.ipv4_mapped)
    # `in` is False across address families, so mixing v4 and v6 CIDRs is safe.
    return any(c in net for net in _networks(allow_private) for c in candidates)


def _same_host(a: IPAddress, b: IPAddress) -> bool:
    def plain(ip: IPAddress) -> IPAddress:
        ip = _unscoped(ip)
        if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        return ip

    return plain(a) == plain(b)


def check_addresses(
    ips: Sequence[IPAddress],
    allow_private: Sequence[str],
    own_addresses: Sequence[IPAddress] = (),
) -> tuple[IPAddress | None, str | None]:
    """Check every address a name resolved to; return (address to dial, None) or (None, reason).

    All addresses must be permitted: a name that resolves to both a public and a private
    address is the DNS-rebinding trick, so one bad address refuses the whole name. The
    proxy's own addresses are refused even when an operator CIDR covers them. The
    address to dial is the first one, and the caller must dial exactly that address.
    """
    if not ips:
        return None, "the name resolved to no addresses"
    for ip in ips:
        if any(_same_host(ip, own) for own in own_addresses):
            return None, f"{_unscoped(ip)} is the proxy's own address and is never dialed"
    for ip in ips:
        if permitted(ip, allow_private):
            continue
        reason = forbidden_reason(ip) or f"{_unscoped(ip)} is forbidden"
        if len(ips) > 1:
            reason += ", and a name is refused if any of its addresses is forbidden"
        return None, reason
    return ips[0], None

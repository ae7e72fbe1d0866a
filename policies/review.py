"""What a valid policy opens that an operator should look at twice.

Pure functions of a `Policy`, shared by `airlock drill` (which fails on the doors) and
`airlock policy usage` (which lists every finding): wildcards over a whole cloud or a
tunnelling, paste or file-sharing service, write methods on broad paths, cloud metadata
ranges, secrets sent to wildcard hosts, guarded address ranges that every run (or an
automatic grant) reaches, and entries that list too many destinations. Validation
(what may not be written at all) is `policies.model`; this module judges what may.

The list of wide domains is data (`WIDE_DOMAINS`): each suffix is one under which
names belong to many unrelated customers, so `*.<suffix>` lets runs reach servers
anyone can create, which is how data leaves.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from airlock.policies.model.capability import Capability
from airlock.policies.model.egress import EgressRule
from airlock.policies.model.policy import Policy

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

MAX_DESTINATIONS = 12
"""An entry (or the allow rules together) weighing more than this is worth splitting."""

HOST_WEIGHT = 1
WILDCARD_WEIGHT = 5
"""`*.example.com` counts as 5 destinations: a domain's subdomains are usually many
servers, so three wildcards alone pass `MAX_DESTINATIONS`."""
WIDE_WEIGHT = MAX_DESTINATIONS + 1
"""A wildcard over a wide domain reaches servers anyone can create: alone it passes
`MAX_DESTINATIONS`."""

METADATA_ADDRESSES = (
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("169.254.170.2"),
    ipaddress.ip_address("fd00:ec2::254"),
    ipaddress.ip_address("100.100.100.200"),
)


@dataclass(frozen=True)
class WideDomain:
    suffix: str
    what: str
    nested: bool = False
    """Customers' names sit at any depth below the suffix (`bucket.s3.eu-west-1.
    amazonaws.com`), so a wildcard anywhere under it is wide too; otherwise only a
    wildcard over the suffix itself (or a parent of it) is, and `*.mine.<suffix>` is
    one customer's own."""


WIDE_DOMAINS: tuple[WideDomain, ...] = (
    # Clouds: storage, functions and hosting where anyone can create a name.
    WideDomain("amazonaws.com", "every AWS customer's S3 buckets, APIs and hosts", nested=True),
    WideDomain("on.aws", "every AWS Lambda function URL", nested=True),
    WideDomain("cloudfront.net", "every AWS CloudFront distribution"),
    WideDomain("core.windows.net", "every Azure storage account (blobs, files, sites)", True),
    WideDomain("azurewebsites.net", "every Azure App Service app"),
    WideDomain("azureedge.net", "every Azure CDN endpoint"),
    WideDomain("azurefd.net", "every Azure Front Door endpoint"),
    WideDomain("cloudapp.azure.com", "every Azure VM's public name", nested=True),
    WideDomain("cloudapp.net", "every Azure cloud service"),
    WideDomain("sharepoint.com", "every Microsoft 365 tenant's SharePoint and OneDrive"),
    WideDomain("storage.googleapis.com", "every Google Cloud Storage bucket"),
    WideDomain("googleusercontent.com", "every Google user-content host", nested=True),
    WideDomain("appspot.com", "every Google App Engine app"),
    WideDomain("run.app", "every Google Cloud Run service", nested=True),
    WideDomain("cloudfunctions.net", "every Google Cloud Function"),
    WideDomain("web.app", "every Firebase Hosting site"),
    WideDomain("firebaseapp.com", "every Firebase Hosting site"),
    WideDomain("firebaseio.com", "every Firebase Realtime Database"),
    WideDomain("digitaloceanspaces.com", "every DigitalOcean Spaces bucket", nested=True),
    WideDomain("ondigitalocean.app", "every DigitalOcean App Platform app"),
    WideDomain("r2.dev", "every Cloudflare R2 public bucket"),
    WideDomain("r2.cloudflarestorage.com", "every Cloudflare R2 account"),
    WideDomain("workers.dev", "every Cloudflare Worker"),
    WideDomain("pages.dev", "every Cloudflare Pages site"),
    WideDomain("supabase.co", "every Supabase project"),
    # Hosting platforms: anyone deploys an app that receives whatever is sent.
    WideDomain("herokuapp.com", "every Heroku app"),
    WideDomain("vercel.app", "every Vercel deployment"),
    WideDomain("netlify.app", "every Netlify site"),
    WideDomain("fly.dev", "every Fly.io app"),
    WideDomain("onrender.com", "every Render service"),
    WideDomain("railway.app", "every Railway app", nested=True),
    WideDomain("deno.dev", "every Deno Deploy project"),
    WideDomain("glitch.me", "every Glitch project"),
    WideDomain("replit.dev", "every Replit app"),
    WideDomain("repl.co", "every Replit app"),
    # Code and file hosting: anyone's repositories, gists, pages and shared files.
    WideDomain("githubusercontent.com", "every GitHub repository's and user's content", True),
    WideDomain("github.io", "every GitHub Pages site"),
    WideDomain("gitlab.io", "every GitLab Pages site"),
    WideDomain("dropboxusercontent.com", "every Dropbox shared file"),
    # Tunnels and request catchers: a public name for anyone's own machine or inbox.
    WideDomain("ngrok.io", "every ngrok tunnel"),
    WideDomain("ngrok.app", "every ngrok tunnel"),
    WideDomain("ngrok-free.app", "every ngrok tunnel"),
    WideDomain("ngrok.dev", "every ngrok tunnel"),
    WideDomain("ngrok-free.dev", "every ngrok tunnel"),
    WideDomain("trycloudflare.com", "every Cloudflare quick tunnel"),
    WideDomain("loca.lt", "every localtunnel tunnel"),
    WideDomain("serveo.net", "every Serveo tunnel"),
    WideDomain("lhr.life", "every localhost.run tunnel"),
    WideDomain("pipedream.net", "every Pipedream request bin"),
    WideDomain("requestcatcher.com", "every Request Catcher inbox"),
    WideDomain("oastify.com", "every Burp Collaborator (out-of-band exfiltration) client"),
    WideDomain("burpcollaborator.net", "every Burp Collaborator client"),
    WideDomain("interact.sh", "every interactsh (out-of-band exfiltration) client"),
)


@dataclass(frozen=True)
class Finding:
    kind: Literal[
        "wide_wildcard",
        "broad_write",
        "metadata",
        "secret_on_wildcard",
        "private_range",
        "many_destinations",
    ]
    entry: str
    """"allow rule NAME", "capability NAME" or "the allow rules"."""
    text: str
    """One sentence starting with `entry`, saying what the entry opens."""

    @property
    def door(self) -> bool:
        """Something runs can get through, not only advice on keeping the policy small."""
        return self.kind != "many_destinations"


def wide_domain(pattern: str) -> WideDomain | None:
    """The wide domain a host pattern opens whole, or None (exact names never do)."""
    if not pattern.startswith("*."):
        return None
    domain = pattern[2:]
    for wide in WIDE_DOMAINS:
        covers = wide.suffix == domain or wide.suffix.endswith("." + domain)
        if covers or (wide.nested and domain.endswith("." + wide.suffix)):
            return wide
    return None


def weight(pattern: str) -> int:
    """How many destinations a host pattern counts as (see the weights above)."""
    if wide_domain(pattern) is not None:
        return WIDE_WEIGHT
    return WILDCARD_WEIGHT if pattern.startswith("*.") else HOST_WEIGHT


def destinations(hosts: Iterable[str]) -> int:
    return sum(weight(h) for h in hosts)


def broad_path(pattern: str) -> bool:
    """Whether a path pattern is all wildcards (`/**`, `/*`, `/*/**`): any path at all,
    or any path of some depth, from the root."""
    return all(segment in ("*", "**") for segment in pattern.split("/")[1:])


def review(policy: Policy) -> list[Finding]:
    """Every finding, allow rules first, then capabilities by name."""
    entries: list[tuple[str, EgressRule | Capability]] = [
        (f"allow rule {rule.name}", rule) for rule in policy.egress.allow
    ]
    entries += [(f"capability {name}", cap) for name, cap in sorted(policy.capabilities.items())]
    found: list[Finding] = []
    for label, entry in entries:
        found += _entry_findings(label, entry)
    total = destinations(h for rule in policy.egress.allow for h in rule.hosts)
    if total > MAX_DESTINATIONS:
        found.append(
            Finding(
                "many_destinations",
                "the allow rules",
                f"the allow rules reach {total} weighted destinations (more than "
                f"{MAX_DESTINATIONS}; a host counts {HOST_WEIGHT}, a wildcard "
                f"{WILDCARD_WEIGHT}, a wide wildcard {WIDE_WEIGHT}): every run reaches all "
                "of them; move some to capabilities",
            )
        )
    return found


def _entry_findings(label: str, entry: EgressRule | Capability) -> list[Finding]:
    found = []
    for host in entry.hosts:
        wide = wide_domain(host)
        if wide is not None:
            found.append(
                Finding(
                    "wide_wildcard", label, f"{label} allows {host}: {wide.what} ({wide.suffix})"
                )
            )
    writes = [m for m in entry.methods if m in WRITE_METHODS]
    broad = [p for p in entry.paths if broad_path(p)]
    if entry.tls == "passthrough":
        found.append(
            Finding(
                "broad_write",
                label,
                f"{label} opens opaque (passthrough) tunnels to {', '.join(entry.hosts)}: any "
                "method on any path, unchecked",
            )
        )
    elif writes and broad:
        found.append(
            Finding(
                "broad_write",
                label,
                f"{label} allows {'/'.join(writes)} on {', '.join(broad)} of "
                f"{', '.join(entry.hosts)}: runs can send anything there",
            )
        )
    found += _address_findings(label, entry)
    secret = entry.secret if isinstance(entry, Capability) else None
    if secret is not None and any(h.startswith("*") for h in entry.hosts):
        found.append(
            Finding(
                "secret_on_wildcard", label, f"{label} sends secret {secret} to a wildcard host"
            )
        )
    weighed = destinations(entry.hosts)
    if isinstance(entry, Capability) and weighed > MAX_DESTINATIONS:
        found.append(
            Finding(
                "many_destinations",
                label,
                f"{label} reaches {weighed} weighted destinations (more than "
                f"{MAX_DESTINATIONS}): split it by task",
            )
        )
    return found


def _address_findings(label: str, entry: EgressRule | Capability) -> list[Finding]:
    networks = [ipaddress.ip_network(cidr, strict=False) for cidr in entry.allow_private]
    found = []
    if any(address in net for net in networks for address in METADATA_ADDRESSES):
        found.append(
            Finding("metadata", label, f"{label} lets runs reach a cloud metadata address")
        )
    automatic = isinstance(entry, EgressRule) or entry.approval == "auto"
    if networks and automatic:
        who = "every run" if isinstance(entry, EgressRule) else "every run that asks, unapproved"
        found.append(
            Finding(
                "private_range",
                label,
                f"{label} opens {', '.join(map(str, networks))} to {who} "
                f"(allow_private, hosts {', '.join(entry.hosts)})",
            )
        )
    return found

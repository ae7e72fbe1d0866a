"""The issuer's public keys: reading a JWKS document, and keeping a JWKS URL's keys fresh.

Belongs here: which keys of a JWKS are usable, the algorithm allowlist registry, and the
refetch rules of a JWKS URL. Not here: checking a token's signature or claims
(`server.auth.verify`), or where the file or URL is configured (`server.auth.config`).

Fetched here rather than with PyJWT's `PyJWKClient` (weighed in issue 30): it fetches with
blocking urllib and reads the whole body with no size cap, counts its refetch cooldown from
the last successful fetch (so while the URL fails, every unknown `kid` fetches again), keeps
time with `time.monotonic` (no clock to pass), and yields PyJWT keys, while tokens are
verified with joserfc.
"""

from __future__ import annotations

import base64
import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
from joserfc.errors import JoseError, UnsupportedAlgorithmError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import JWKRegistry, Key, KeySet
from joserfc.jws import JWSRegistry

log = logging.getLogger(__name__)

#: Asymmetric JWS algorithms a config may allow. HS* are refused on purpose: a shared secret
#: lets every verifier mint tokens, and keys from a JWKS must never double as HMAC secrets.
#: Intersected with what the installed joserfc implements (`Ed25519` is RFC 9864, newer).
SUPPORTED_ALGORITHMS = frozenset(
    {"EdDSA", "Ed25519", "Ed448", "ES256", "ES384", "ES512"}
    | {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
) & frozenset(JWSRegistry.algorithms)
#: Unknown-`kid` refetches of a JWKS URL are at least this far apart (also after failures).
JWKS_REFETCH_INTERVAL_S = 60.0
#: A fetched JWKS is refetched when older than this, so removed (revoked) keys go away.
JWKS_MAX_AGE_S = 3600.0
JWKS_MAX_BYTES = 1024 * 1024
JWKS_FETCH_TIMEOUT_S = 10.0
MIN_RSA_BITS = 2048


def read_jwks_file(path: Path) -> tuple[list[Key], list[str]]:
    """The usable public keys of the JWKS file at `path`, and its problems."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [], [f"cannot read {path}: {exc.strerror or exc}"]
    return parse_jwks(raw)


def parse_jwks(raw: bytes) -> tuple[list[Key], list[str]]:
    """The usable public signing keys of a JWKS document, and what is wrong with it.

    Refused: symmetric (`oct`) keys, private key material, encryption-only keys, RSA
    below 2048 bits, duplicate `kid`s, and anything joserfc cannot import.
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return [], [f"not JSON: {exc}"]
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        return [], ['not a JWKS: expected {"keys": [ ... ]} with at least one key']
    keys: list[Key] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"keys[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        kty = entry.get("kty")
        if kty not in ("OKP", "EC", "RSA"):
            problems.append(
                f"{where}: key type {kty!r} is not accepted; publish OKP, EC or RSA public keys"
            )
            continue
        if entry.get("use") not in (None, "sig"):
            problems.append(f"{where}: 'use' is {entry.get('use')!r}; signing keys need 'sig'")
            continue
        bits = _rsa_bits(entry) if kty == "RSA" else None
        if bits is not None and bits < MIN_RSA_BITS:
            # Checked before import: joserfc warns (not refuses) on short RSA keys.
            problems.append(f"{where}: RSA key of {bits} bits; use at least {MIN_RSA_BITS}")
            continue
        try:
            key = JWKRegistry.import_key(entry)
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            problems.append(f"{where}: not a usable key: {exc}")
            continue
        if key.is_private:
            problems.append(f"{where}: contains private key material; publish only the public key")
            continue
        keys.append(key)
    kids = Counter(key.kid for key in keys if key.kid is not None)
    problems += [
        f"kid {kid!r} appears {n} times; kids must be unique" for kid, n in kids.items() if n > 1
    ]
    if len(keys) > 1 and any(key.kid is None for key in keys):
        problems.append("with several keys every key needs a 'kid'")
    return keys, problems


def _rsa_bits(entry: Mapping[str, Any]) -> int | None:
    modulus = entry.get("n")
    if not isinstance(modulus, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(modulus + "=" * (-len(modulus) % 4))
    except ValueError:
        return None
    return int.from_bytes(raw, "big").bit_length()


class AllowlistRegistry(JWSRegistry):
    """A JWS registry that accepts exactly the configured algorithms.

    joserfc's own check falls back to its "recommended" list when the allowlist is empty and
    warns on some names (`EdDSA`); here an empty allowlist allows nothing and nothing warns.
    """

    def get_alg(self, name: str) -> JWSAlgModel:
        if not self.allowed or name not in self.allowed or name not in self.algorithms:
            raise UnsupportedAlgorithmError(f"algorithm {name!r} is not allowed")
        return self.algorithms[name]


class JwksUrlKeys:
    """The keys published at a JWKS URL: fetched with httpx on first use, refetched when
    older than `JWKS_MAX_AGE_S` and on an unknown `kid`, at most once every
    `JWKS_REFETCH_INTERVAL_S` (also after failures); a failed fetch keeps the keys held.

    `clock` returns Unix seconds; `transport` replaces httpx's network transport.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._url = url
        self._clock = clock
        self._transport = transport
        self._keyset: KeySet | None = None
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._fetch_lock = anyio.Lock()

    async def keyset_for(self, kid: str | None) -> KeySet | None:
        """The keys to check a token with `kid` against; None while none were ever fetched."""
        if self._wants_fetch(kid):
            async with self._fetch_lock:
                # Another request may have fetched while this one waited.
                if self._wants_fetch(kid):
                    await self._fetch(self._url)
        return self._keyset

    def _wants_fetch(self, kid: str | None) -> bool:
        now = self._clock()
        if self._attempted_at is not None and now - self._attempted_at < JWKS_REFETCH_INTERVAL_S:
            return False
        if self._keyset is None or self._fetched_at is None:
            return True
        return now - self._fetched_at >= JWKS_MAX_AGE_S or not _has_kid(self._keyset, kid)

    async def _fetch(self, url: str) -> None:
        self._attempted_at = self._clock()
        try:
            async with (
                httpx.AsyncClient(
                    transport=self._transport,
                    timeout=JWKS_FETCH_TIMEOUT_S,
                    follow_redirects=False,
                ) as client,
                client.stream("GET", url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    log.warning(
                        "JWKS %s: HTTP %d; keeping the keys held", url, response.status_code
                    )
                    return
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > JWKS_MAX_BYTES:
                        log.warning("JWKS %s: larger than %d bytes; ignored", url, JWKS_MAX_BYTES)
                        return
        except httpx.HTTPError as exc:
            log.warning("JWKS %s: %s; keeping the keys held", url, short_reason(exc))
            return
        keys, problems = parse_jwks(bytes(body))
        for problem in problems:
            log.warning("JWKS %s: %s", url, problem)
        if not keys:
            log.warning("JWKS %s: no usable key; keeping the keys held", url)
            return
        self._keyset = KeySet(keys)
        self._fetched_at = self._attempted_at
        log.info("JWKS %s: %d key(s) loaded", url, len(keys))


def _has_kid(keyset: KeySet, kid: str | None) -> bool:
    if kid is None:
        return len(keyset.keys) == 1
    return any(key.kid == kid for key in keyset.keys)


def short_reason(exc: BaseException) -> str:
    """An exception's text clipped for a log line."""
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."

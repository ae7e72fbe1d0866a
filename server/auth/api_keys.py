"""API keys: minting a key and the hash the auth config keeps instead of it.

Not here: matching a presented key against the config (`server.auth.verify`).
"""

from __future__ import annotations

import base64
import hashlib
import secrets

API_KEY_PREFIX = "alk_"
HASH_PREFIX = "sha256:"


def generate_api_key() -> tuple[str, str]:
    """A new API key and the hash to put in the config: `("alk_...", "sha256:<hex>")`.

    The key is 32 random bytes, URL-safe base64 without padding; show it once and keep
    only the hash.
    """
    raw = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")
    key = API_KEY_PREFIX + raw
    return key, hash_api_key(key)


def hash_api_key(key: str) -> str:
    """`"sha256:<hex>"` of the key's UTF-8 bytes, the form the config stores."""
    return HASH_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()

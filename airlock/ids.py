"""Minting the random ids Airlock hands out (runs, sessions, grants, approvals, ...).

Every id is a prefix naming its kind and lowercase unpadded base32 of fresh random bytes:
unguessable, case-insensitive-safe, and readable in a log line. The format has this one
owner: `new_id` mints ids and `id_pattern` recognises them when they come back. Not here:
what an id is checked against in the store (each room that owns the kind does that).
"""

from __future__ import annotations

import base64
import math
import re
import secrets


def new_id(prefix: str, *, random_bytes: int = 16) -> str:
    """`prefix` followed by `random_bytes` random bytes in lowercase base32, unpadded
    (16 bytes: 26 characters, 128 bits; 10 bytes: 16 characters)."""
    token = base64.b32encode(secrets.token_bytes(random_bytes)).decode("ascii")
    return prefix + token.rstrip("=").lower()


def id_pattern(prefix: str, *, random_bytes: int = 16) -> re.Pattern[str]:
    """What `new_id(prefix, random_bytes=...)` mints, and nothing else (use `fullmatch`)."""
    length = math.ceil(random_bytes * 8 / 5)
    return re.compile(re.escape(prefix) + f"[a-z2-7]{{{length}}}")

"""Helpers shared by the tests (imported as `support`; pytest puts tests/ on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


async def wait_until(check: Callable[[], T], *, within: float = 30, interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail after `within` seconds.

    For conditions with no event to wait on, such as a container appearing in the engine.
    """
    with anyio.fail_after(within):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(interval)

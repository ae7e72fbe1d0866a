"""Helpers shared by the tests (imported as `support`; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

T = TypeVar("T")

# Tests that watch a session's containers by their `airlock.session` label run without
# the warm pool: pooled containers are created before any session and carry no session
# label. tests/test_backend_contract.py covers pooled containers' teardown.
NO_POOL: dict[str, Any] = {"pool": {"size": 0}}
NO_POOL_TOML = "[pool]\nsize = 0\n"


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


def make_wheel(directory: Path, name: str = "airlock_probe", version: str = "1.0") -> Path:
    """A minimal valid pure-Python wheel."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", record)
    return path

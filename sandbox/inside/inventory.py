"""Writes the image's manifest: run inside the image at build time, as its last step.

Prints JSON: the Python version, the packages installed from the lock file with their
versions, and the command-line tools with the first line of their version output. The
build stores it as /opt/airlock/manifest.json, where agents and operators read what the
image holds without probing. Only the standard library of the image's Python may be used.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from importlib import metadata

# Where pip puts what the lock file pins; Debian's own Python modules live elsewhere.
LOCKED_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
TOOLS = (
    *("bash", "git", "curl", "wget", "jq", "unzip", "zip", "patch", "file", "sqlite3"),
    *("gcc", "make", "node", "npm", "pip", "tar", "xz"),
)
# Tools that print their version for -v, not --version.
_SHORT_FLAG = {"unzip", "zip"}


def tool_version(name: str) -> str | None:
    path = shutil.which(name)
    if path is None:
        return None
    flag = "-v" if name in _SHORT_FLAG else "--version"
    done = subprocess.run(
        [path, flag], capture_output=True, text=True, errors="replace", timeout=60, check=False
    )
    for line in (done.stdout + done.stderr).splitlines():
        if any(ch.isdigit() for ch in line):
            return line.strip()[:120]
    return "installed"


def main() -> None:
    packages = {
        dist.metadata["Name"]: dist.version
        for dist in metadata.distributions(path=[LOCKED_PACKAGES])
    }
    tools = {name: version for name in TOOLS if (version := tool_version(name)) is not None}
    manifest = {
        "python": platform.python_version(),
        "python_packages": dict(sorted(packages.items(), key=lambda kv: kv[0].lower())),
        "tools": tools,
    }
    json.dump(manifest, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

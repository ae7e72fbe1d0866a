"""The session's editable installs, put on every sandbox Python's path as data, never run.

`pip install -e DIR` in a sandbox (see sandbox/files/pip) installs into EDITABLE_DIR, under
/workspace, so the install lasts as long as the session's files do. What pip leaves there
is the project's metadata and a `.pth` file naming the project's source directory; Python
would also execute any line of a `.pth` that starts with `import`, and anything a run
wrote in /workspace was chosen by whatever that run processed. So this module, not site,
reads those files: a line that names an existing directory inside /workspace is appended
to `sys.path` (after everything installed in the image, so it adds names and shadows
none), and every other line, `import` lines first of all, is ignored.

In the image this file is `airlock_editable_site` in Python's site-packages, imported at
every start by a root-owned `.pth` of the image (the only one that runs code). Only the
standard library of the image's Python may be used here, and little of it: every start
of Python in a sandbox pays for this import.
"""

from __future__ import annotations

import os

WORKSPACE = "/workspace"
EDITABLE_DIR = "/workspace/.editable"
# Bounds on what a start reads and checks, whatever a run left there.
MAX_PTH_FILES = 64
MAX_PTH_BYTES = 64 * 1024
MAX_LINES = 1024


def editable_paths(directory: str = EDITABLE_DIR, workspace: str = WORKSPACE) -> list[str]:
    """`directory` itself (it holds the installs' metadata) and the directories its `.pth`
    files name, each inside `workspace`; empty when `directory` is not a directory."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".pth"))
    except OSError:
        return []
    inside = os.path.realpath(workspace) + os.sep
    found = [directory]
    lines = [line for name in names[:MAX_PTH_FILES] for line in _lines(f"{directory}/{name}")]
    for line in lines[:MAX_LINES]:
        if line.startswith(("import ", "import\t", "#")):
            continue
        path = os.path.realpath(os.path.join(directory, line))
        if path.startswith(inside) and os.path.isdir(path) and path not in found:
            found.append(path)
    return found


def extend(path: list[str]) -> None:
    """Append the editable installs' directories to `path` (sys.path), each once."""
    for entry in editable_paths():
        if entry not in path:
            path.append(entry)


def _lines(pth: str) -> list[str]:
    try:
        # O_NONBLOCK: a FIFO planted under a .pth name must not hang every start.
        fd = os.open(pth, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_PTH_BYTES)
    except OSError:
        return []
    return [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]

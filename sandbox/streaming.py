"""Running a build tool on the host (debootstrap, apt-get in the bootstrapped tree, pip) and
reading its output as it comes, one line at a time, keeping the last lines for the error.

Not here: what the lines mean or which are progress (each caller's `on_line` decides).
"""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Callable


def run_streaming(
    argv: list[str],
    on_line: Callable[[str], None],
    *,
    env: dict[str, str] | None = None,
    tail_lines: int = 20,
) -> tuple[int, list[str]]:
    """Run `argv` with no stdin, calling `on_line` for each line of its stdout and stderr
    (merged, right-stripped); its exit status and its last `tail_lines` lines."""
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    ) as proc:
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                on_line(line)
        except BaseException:
            # Let it clean up (debootstrap's exit trap unmounts what it mounted in the tree).
            proc.terminate()
            raise
    return proc.returncode, list(tail)

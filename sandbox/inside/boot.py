"""The entrypoint of every sandbox container: starts the code's process, then the runner.

The process that becomes the code (prestart.py: an interpreter up before the job comes)
is started first (codeproc.py), before the runner is even imported, so that the two start
side by side: under gVisor the runner's imports take about 90 ms and the code's
interpreter about 100, and a cold call waited for one after the other. So what this
module imports before that start needs nothing Python has not loaded at start but `os`,
`sys`, `time` and `struct` (wire.py's frame header).

The image holds this package as `inside` under /opt/airlock; this module imports the
runner once the code's process is started, and the runner never imports this module.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Started as the image's entrypoint script, which -I leaves off the path: the package
    # is its parent directory's, and naming it lets the relative imports work (PEP 366).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "inside"

from .codeproc import start_code_process


def main() -> None:
    """`python3 -I -S boot.py [--egress SOCKET PORT]`: the arguments go to the runner."""
    code = start_code_process()
    # Imported only now: the code's interpreter starts while the runner's imports load.
    from . import runner

    runner.main(sys.argv[1:], code)


if __name__ == "__main__":
    main()

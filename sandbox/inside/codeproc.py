"""The process that becomes the code, as boot.py starts it and the runner gives it its order.

Both the entrypoint (boot.py, before the runner is even imported) and the runner (when the
first process is gone) start it here, so neither imports the other for it. It is started
with posix_spawn (vfork and exec, no fork of the interpreter, no subprocess module), and
this module needs nothing Python has not loaded at start but `os` and `time`, besides the
layout in wire.py: boot.py imports it before the code's interpreter starts.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import os
import time

from .wire import HOME_TEMPLATE, SANDBOX_UID, WORKSPACE

PYTHON = "/usr/bin/python3"
PRESTART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prestart.py")
# util-linux's setpriv drops to the sandbox user before it execs the rest of the command
# line: uid and gid, no groups, empty bounding, inheritable and ambient sets, and
# no-new-privileges again.
DROP_TO_SANDBOX_USER = (
    "/usr/bin/setpriv",
    f"--reuid={SANDBOX_UID}",
    f"--regid={SANDBOX_UID}",
    "--clear-groups",
    "--bounding-set=-all",
    "--inh-caps=-all",
    "--ambient-caps=-all",
    "--no-new-privs",
)
# Where prestart.py finds the pipe its order comes down.
ORDER_FD = 3
WAIT_PAUSE_MAX_S = 0.05


class CodeProcess:
    """The process that becomes the code, as the runner sees it: its pid (also its
    process group: it leads a session of its own), its output pipes, and the pipe its
    one order goes down."""

    def __init__(self, pid: int, stdout: int, stderr: int, control: int) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self._control = control
        self.returncode: int | None = None

    def give_order(self, argv: list[str], env: dict[str, str]) -> bool:
        """Whether the order reached the process. Only a write that fails says it is gone:
        one that ran the code at once may have ended already, and must not run it twice."""
        try:
            with open(self._control, "wb") as control:
                control.write(_order(argv, env))
        except OSError:
            return False
        return True

    def poll(self) -> int | None:
        """Its exit status once it has ended, else None."""
        self.ended_within(0)
        return self.returncode

    def wait(self) -> int:
        """Its exit status, once it has ended."""
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def ended_within(self, timeout: float) -> bool:
        """Whether it has ended, waiting for that at most `timeout` seconds."""
        if self.returncode is None:
            self.returncode = reap_within(self.pid, timeout)
        return self.returncode is not None


def reap_within(pid: int, timeout: float) -> int | None:
    """Reap our child `pid` if it ends within `timeout` seconds: its exit status (minus
    the signal's number if a signal ended it, as subprocess has it), else None."""
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            return os.waitstatus_to_exitcode(status)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(pause, left))
        pause = min(pause * 2, WAIT_PAUSE_MAX_S)


def start_code_process() -> CodeProcess | None:
    """Start the process that will become the code, before the job is known.

    It starts as the code would: the sandbox user (setpriv), a session of its own, stdin
    from /dev/null, pipes for its output, in the environment every run starts from (the
    container's, as the host set it, less the HOSTNAME the engine adds). It holds no
    other descriptor of ours: everything Python opens is close-on-exec, and prestart.py
    closes anything else it finds. None if it cannot be started: the runner says so
    when the job comes.
    """
    order, control = os.pipe()
    stdout, stdout_w = os.pipe()
    stderr, stderr_w = os.pipe()
    ours, theirs = (control, stdout, stderr), (order, stdout_w, stderr_w)
    try:
        pid = os.posix_spawn(
            DROP_TO_SANDBOX_USER[0],
            [
                *DROP_TO_SANDBOX_USER,
                PYTHON,
                "-u",
                PRESTART,
                str(ORDER_FD),
                WORKSPACE,
                HOME_TEMPLATE,
            ],
            {name: value for name, value in os.environ.items() if name != "HOSTNAME"},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, stdout_w, 1),
                (os.POSIX_SPAWN_DUP2, stderr_w, 2),
                (os.POSIX_SPAWN_DUP2, order, ORDER_FD),
            ],
            setsid=True,
        )
    except OSError:
        for fd in ours:
            os.close(fd)
        return None
    finally:
        for fd in theirs:
            os.close(fd)
    return CodeProcess(pid, stdout, stderr, control)


def _order(argv: list[str], env: dict[str, str]) -> bytes:
    """The order for prestart.py: the count of arguments, the arguments, then NAME=VALUE
    entries, each ended by a NUL byte."""
    items = [str(len(argv)), *argv, *(f"{name}={value}" for name, value in env.items())]
    return b"".join(os.fsencode(item) + b"\0" for item in items)

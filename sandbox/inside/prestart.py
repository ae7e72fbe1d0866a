"""The process that becomes the user's code, started before the job is known.

boot.py (via codeproc.py) starts it as the sandbox user when its container starts, so a call
does not wait for Python to start (under gVisor that was most of a warm `print(1)`):
`prestart.py ORDER_FD DIRECTORY [HOME_TEMPLATE]`. It fills the code's (empty) HOME with a
copy of HOME_TEMPLATE (the caches the image warmed, such as matplotlib's font list, which
takes seconds to build), moves to DIRECTORY (the code's working directory),
keeps no descriptor but its standard three and ORDER_FD, and waits for one order
there: the job's argv and
environment (the count of arguments, the arguments, then NAME=VALUE entries, each ended
by a NUL byte: neither can hold one, and reading it needs no module Python has not
already loaded). Then it becomes that program:

- `python3 -u SCRIPT` runs here, in this interpreter, as a fresh `python3 -u SCRIPT`
  would: a new `__main__` module with the same globals, `sys.argv`, `sys.path[0]`,
  `os.environ`, and an uncaught exception reported by `sys.excepthook` without this
  file's frame, exit status 1;
- anything else (another language, or an environment that differs in what Python reads
  while it starts, or editable installs the job's workspace brought in, which a starting
  Python puts on its path) is exec'd, so it starts exactly as it would have.

What stays visible of the early start: the modules imported here are already in
`sys.modules`, `/proc/self/environ` and `sys.orig_argv` show how this process started,
and the code runs one frame deeper.

Only the standard library of the image's Python may be used here.
"""

from __future__ import annotations

import builtins
import os
import signal
import site
import sys
from importlib.machinery import SourceFileLoader
from types import ModuleType

# What CPython, the dynamic loader or libc read while a process starts: a job whose
# environment differs in any of these gets a fresh interpreter.
STARTUP_NAMES = frozenset({"HOME", "LANG", "LANGUAGE", "PATH", "TZ", "GLIBC_TUNABLES"})
STARTUP_PREFIXES = ("PYTHON", "LC_", "LD_", "MALLOC_")
# Where `pip install -e` puts a session's editable installs (editable_site.py).
EDITABLE_DIR = "/workspace/.editable"


def _keep_only_standard_and(order: int) -> None:
    """Close whatever else came with the spawn: the code must hold nothing of the
    runner's (its stdin and stdout are the host's report channel)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != order:
            # Not contextlib.suppress: an import more, in every sandbox's start.
            try:  # noqa: SIM105
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def _read_order(fd: int) -> tuple[list[str], dict[str, str]]:
    with os.fdopen(fd, "rb") as control:
        count, *items = [os.fsdecode(item) for item in control.read().split(b"\0")[:-1]]
    argv, entries = items[: int(count)], items[int(count) :]
    return argv, dict(entry.split("=", 1) for entry in entries)


def _starts_alike(env: dict[str, str]) -> bool:
    names = {n for n in (*env, *os.environ) if n in STARTUP_NAMES or n.startswith(STARTUP_PREFIXES)}
    return all(env.get(n) == os.environ.get(n) for n in names)


def _runs_here(argv: list[str], env: dict[str, str]) -> bool:
    return (
        len(argv) == 3
        and argv[1] == "-u"
        and os.path.realpath(argv[0]) == os.path.realpath(sys.executable)
        and _starts_alike(env)
        and not (site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()))
        and not os.path.isdir(EDITABLE_DIR)
    )


def _fill_home(template: str) -> None:
    """Copy the files under `template` into HOME, which is empty: a copy, not a link, so
    that a program may rewrite its cache as it would anywhere."""
    home = os.environ.get("HOME", "")
    for root, _dirs, files in os.walk(template):
        target = os.path.join(home, os.path.relpath(root, template))
        os.makedirs(target, exist_ok=True)
        for name in files:
            with open(os.path.join(root, name), "rb") as source:
                data = source.read()
            with open(os.path.join(target, name), "wb") as copy:
                copy.write(data)


def _run(script: str) -> None:
    with open(script, "rb") as f:
        source = f.read()
    main = ModuleType("__main__")
    main.__dict__.update(
        __loader__=SourceFileLoader("__main__", script),
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
        __file__=script,
        __cached__=None,
    )
    sys.modules["__main__"] = main
    sys.argv[:] = [script]
    sys.path[0] = os.path.dirname(script)
    try:
        exec(compile(source, script, "exec", dont_inherit=True), main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        trace = exc.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename != script:
            trace = trace.tb_next
        # Python's hook prints the exception's own traceback, not the one it is given.
        sys.excepthook(type(exc), exc.with_traceback(trace), trace)
        if isinstance(exc, KeyboardInterrupt):
            # As Python itself ends on one: by the signal, so the parent sees it.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


def main() -> None:
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.exit("prestart.py must be started as the sandbox user")
    # The code is the OOM killer's first choice, so the runner survives to report it.
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    order, directory = int(sys.argv[1]), sys.argv[2]
    _keep_only_standard_and(order)
    if len(sys.argv) > 3:
        # A home it cannot fill is a slower first plot, not a failed run.
        try:  # noqa: SIM105
            _fill_home(sys.argv[3])
        except OSError:
            pass
    os.chdir(directory)
    argv, env = _read_order(order)
    if not _runs_here(argv, env):
        # Python ignores these two for itself; a program it execs must get them back, as
        # subprocess gives them back (or `yes | head -1` in bash would end in EPIPE errors).
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        os.execve(argv[0], argv, env)
    os.environ.clear()
    os.environ.update(env)
    _run(argv[2])


if __name__ == "__main__":
    main()

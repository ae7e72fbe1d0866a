"""The code's process is started with the sandbox (sandbox/inside/prestart.py) and must behave as
a fresh `python3 -u main.py` would: these runs compare it with one, or with what Python
itself prints, through the real server and sandbox."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import run

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MakeServer = Callable[..., MCPServer]

# Printed by the code as it runs, and by a fresh interpreter it starts on the same file.
PROBE = """
import json, os, subprocess, sys
import pickle

class Thing:
    pass

def facts():
    return {
        "name": __name__,
        "file": __file__,
        "argv0": sys.argv[0],
        "path0": sys.path[0],
        "path": sys.path[1:],
        "globals": sorted(k for k in globals() if not k.startswith("_") or k.startswith("__")),
        "dunders": {k: repr(globals()[k]) for k in ("__doc__", "__package__", "__spec__",
                                                   "__cached__", "__annotations__")},
        "loader": type(__loader__).__name__,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "uid": (os.getuid(), os.geteuid(), os.getgid(), os.getgroups()),
        "session_leader": os.getsid(0) == os.getpid(),
        "write_through": sys.stdout.write_through,
        "flags": repr(sys.flags),
        "main_is_this": sys.modules["__main__"].__dict__ is globals(),
        "pickles": pickle.loads(pickle.dumps(Thing())).__class__.__module__,
        "prestarted": any(a.endswith("prestart.py") for a in sys.orig_argv),
    }

if sys.argv[1:] == ["fresh"]:
    print(json.dumps(facts()))
else:
    here = facts()
    fresh = subprocess.run([sys.executable, "-u", __file__, "fresh"], capture_output=True,
                           text=True, check=True, start_new_session=True)
    print(json.dumps({"here": here, "fresh": json.loads(fresh.stdout)}))
"""


async def test_the_code_runs_in_the_prestarted_process_as_in_a_fresh_interpreter(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        data = await run(client, PROBE)
    assert data["status"] == "ok", data
    facts = json.loads(data["stdout"]["text"])
    here, fresh = facts["here"], facts["fresh"]
    assert here.pop("prestarted") is True
    assert fresh.pop("prestarted") is False
    # The fresh one runs as a child of the code, so it is not a session leader.
    assert here.pop("session_leader") is True
    fresh.pop("session_leader")
    assert here == fresh
    assert here["name"] == "__main__" and here["file"] == "/tmp/.airlock/main.py"
    assert here["path0"] == "/tmp/.airlock" and here["cwd"] == "/workspace"
    assert here["uid"] == [1000, 1000, 1000, []]
    assert here["pickles"] == "__main__"


@pytest.mark.parametrize(
    ("code", "exit_code", "stderr"),
    [
        (
            'def f():\n    raise ValueError("boom")\nf()\n',
            1,
            "Traceback (most recent call last):\n"
            '  File "/tmp/.airlock/main.py", line 3, in <module>\n'
            "    f()\n"
            '  File "/tmp/.airlock/main.py", line 2, in f\n'
            '    raise ValueError("boom")\n'
            "ValueError: boom\n",
        ),
        (
            "print(\n",
            1,
            '  File "/tmp/.airlock/main.py", line 1\n'
            "    print(\n"
            "         ^\n"
            "SyntaxError: '(' was never closed\n",
        ),
        ("import sys\nsys.exit(3)\n", 3, ""),
        ('import sys\nsys.exit("bye")\n', 1, "bye\n"),
        (
            "import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write(f'atexit {len(sys.argv)}\\n'))\n"
            "raise SystemExit(4)\n",
            4,
            "atexit 1\n",
        ),
        (
            "import sys\n"
            "sys.excepthook = lambda t, v, tb: print('hooked', t.__name__, file=sys.stderr)\n"
            "1 / 0\n",
            1,
            "hooked ZeroDivisionError\n",
        ),
        (
            "raise KeyboardInterrupt\n",
            130,
            "Traceback (most recent call last):\n"
            '  File "/tmp/.airlock/main.py", line 1, in <module>\n'
            "    raise KeyboardInterrupt\n"
            "KeyboardInterrupt\n",
        ),
    ],
    ids=["traceback", "syntax-error", "exit-3", "exit-text", "atexit", "excepthook", "sigint"],
)
async def test_an_ending_reads_as_python_itself_reports_it(
    make_server: MakeServer, code: str, exit_code: int, stderr: str
) -> None:
    async with Client(make_server()) as client:
        data = await run(client, code)
    assert data["exit_code"] == exit_code, data
    assert data["stderr"]["text"] == stderr


async def test_editable_installs_brought_in_get_a_fresh_interpreter_that_uses_them(
    make_server: MakeServer,
) -> None:
    files = [
        {"path": ".editable/__editable__.brought-1.0.pth", "content": "/workspace/src\n"},
        {"path": "src/brought.py", "content": "WHERE = 'editable'\n"},
        # HOME is not /workspace, and Python has no user site: this is only a file.
        {"path": ".local/lib/python3.11/site-packages/brought.py", "content": "WHERE = 'user'\n"},
    ]
    code = (
        "import sys, brought\n"
        "print(brought.WHERE, any(a.endswith('prestart.py') for a in sys.orig_argv))\n"
    )
    async with Client(make_server()) as client:
        data = await run(client, code, files=files)
    assert data["stdout"]["text"] == "editable False\n", data


async def test_bash_gets_its_own_process(make_server: MakeServer) -> None:
    code = 'echo "$0" "$BASH_VERSION" "$(cat /proc/$$/cmdline | tr "\\0" " ")"'
    async with Client(make_server()) as client:
        data = await run(client, code, language="bash")
    assert data["status"] == "ok", data
    assert data["stdout"]["text"].startswith("/tmp/.airlock/main.sh 5.")
    assert data["stdout"]["text"].endswith(" /bin/bash /tmp/.airlock/main.sh \n")

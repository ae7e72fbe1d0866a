"""A copied repository is a git repository in the box: real MCP client, real Docker.

The copy's `.git` is the host's own work (sandbox/gitbase.py), never the host
repository's: git in the sandbox shows the agent exactly what `get_patch` will return,
in every later run of the session, and none of the host's hooks, config, remotes or
objects ever reach the box.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from support import ok
from test_hatch_repos import MakeServer, patch_cli, policy_with, run

from airlock.sandbox.gitbase import CONFIG
from airlock.sandbox.runtime import GVISOR, RUNC

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CALC = b"def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TOKEN = "host-token-5c2e"


def host_git(root: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(root.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": str(root.parent / "no-gitconfig"),
    }
    done = subprocess.run(
        ["git", *args], cwd=root, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def make_repo(base: Path) -> Path:
    root = base / "repo"
    root.mkdir()
    (root / "calc.py").write_bytes(CALC)
    (root / "NOTES.txt").write_bytes(b"old notes\n")
    (root / "keep.txt").write_bytes(b"one\ntwo\nthree\n")
    return root


def sections(patch: str) -> str:
    """A patch with git's function names after hunk ranges dropped (get_patch writes none)."""
    return re.sub(r"(?m)^(@@ [^@]+ @@).*$", r"\1", patch)


async def raw_patch(
    data_dir: Path, c: Client, copy_id: str, sid: str
) -> tuple[dict[str, Any], str]:
    got = await ok(c, "get_patch", {"copy_id": copy_id, "session_id": sid})
    shown = patch_cli(data_dir, "show", got["patch_id"], "--raw")
    assert shown.returncode == 0, shown.stderr
    return got, shown.stdout


def git_paths(result: dict[str, Any]) -> list[str]:
    changes = result["changes"]
    listed = [a["path"] for a in result["artifacts"]]
    listed += [e["path"] for e in changes["added"] + changes["modified"]] + changes["deleted"]
    return [p for p in listed if ".git" in p.split("/")]


WORK = r"""
set -e
cd app
echo "clean: [$(git status --porcelain --untracked-files=all)]"
sed -i 's/a - b/a + b/' calc.py
rm NOTES.txt
printf 'print("hi")\n' > tool.py
python3 -c 'import calc' && test -d __pycache__
echo ===status
git status --porcelain --untracked-files=all
echo ===diff
git diff --full-index
git add -N .
echo ===whole
git diff --full-index airlock-base
"""

LATER = r"""
set -e
cd app
git commit -qam 'fix add'
printf 'four\n' >> keep.txt
git stash -q
echo ===log
git log --format=%s
echo ===stash
git stash list --format=%gs
"""

LAST = r"""
set -e
cd app
git stash pop -q
git add -N .
echo ===status
git status --porcelain --untracked-files=all
echo ===diff
git diff --full-index airlock-base
"""


def split(patch: str) -> list[str]:
    """A patch's sections, one a file."""
    return ["diff --git " + s for s in patch.split("diff --git ")[1:]]


def part(stdout: str, name: str) -> str:
    """The lines a script printed after `===name`, up to the next `===` line."""
    lines = stdout.split(f"==={name}\n", 1)[1].splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if line.startswith("===")]
    return "".join(lines[: ends[0] if ends else len(lines)])


@pytest.mark.parametrize("sandbox_runtime", [GVISOR, RUNC])
async def test_git_in_the_box_shows_what_get_patch_returns_in_every_later_run(
    make_server: MakeServer, tmp_path: Path, data_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    async with Client(make_server(policy_with(repo)), mode="auto") as c:
        copied = await ok(c, "copy_in", {"root": "app", "to": "app"})
        sid, copy_id = copied["session_id"], copied["copy_id"]

        worked = await run(c, WORK, sid)
        assert worked["status"] == "ok", worked
        out = worked["stdout"]["text"]
        assert "clean: []" in out
        # New caches are left out of git status as they are left out of the patch.
        assert part(out, "status").splitlines() == [" D NOTES.txt", " M calc.py", "?? tool.py"]
        got, patch = await raw_patch(data_dir, c, copy_id, sid)
        assert {(f["path"], f["change"]) for f in got["files"]} == {
            ("NOTES.txt", "deleted"),
            ("calc.py", "modified"),
            ("tool.py", "added"),
        }
        assert got["ignored"] == ["__pycache__/calc.cpython-311.pyc"] and got["refused"] == []
        # Plain git diff shows the files git tracks; after `git add -N .` (new files too),
        # git diff against the base is the patch, byte for byte.
        tracked = [t for t in split(patch) if not t.startswith("diff --git a/tool.py ")]
        assert split(sections(part(out, "diff"))) == tracked
        assert sections(part(out, "whole")) == patch
        # git rewrote its index and wrote objects; none of that is listed as the run's work.
        assert git_paths(worked) == []
        assert {a["path"] for a in worked["artifacts"]} == {
            "app/calc.py",
            "app/tool.py",
            "app/__pycache__/calc.cpython-311.pyc",
        }

        later = await run(c, LATER, sid)
        assert later["status"] == "ok", later
        assert part(later["stdout"]["text"], "log").splitlines() == [
            "fix add",
            f"copy of root 'app' ({copy_id})",
        ]
        assert re.fullmatch(
            r"WIP on main: [0-9a-f]{7,} fix add\n", part(later["stdout"]["text"], "stash")
        )
        assert git_paths(later) == []

        last = await run(c, LAST, sid)
        assert last["status"] == "ok", last
        out = last["stdout"]["text"]
        assert part(out, "status").splitlines() == [" M keep.txt"]
        # The agent's own commit hides nothing: the patch is the workspace against the copy.
        got, patch = await raw_patch(data_dir, c, copy_id, sid)
        assert {f["path"] for f in got["files"]} == {"NOTES.txt", "calc.py", "keep.txt", "tool.py"}
        assert sections(part(out, "diff")) == patch
        assert "+four\n" in patch and "+    return a + b\n" in patch
        assert ".git" not in patch


BOX_LOOKS = r"""
cd app
echo ===config
cat .git/config
echo ===remotes
git remote -v
echo ===found
git config --get-regexp 'remote|credential|hooks|url' ; echo "exit $?"
ls .git/hooks 2>&1 | head -1
git cat-file -e "$HOST_HEAD" 2>&1 || echo "no host commit"
git rev-list --all --count
grep -rl "host-token" .git || echo "no token"
git commit -q --allow-empty -m mine && echo committed
"""


async def test_the_hosts_git_never_reaches_the_box(
    make_server: MakeServer, tmp_path: Path, data_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    marker = tmp_path / "hook-ran"
    host_git(repo, "init", "-q", "-b", "trunk")
    host_git(repo, "remote", "add", "origin", f"https://{TOKEN}@git.example.com/app.git")
    host_git(repo, "config", "credential.helper", f"store --file={tmp_path}/creds")
    host_git(repo, "config", "core.hooksPath", str(repo / ".git" / "hooks"))
    host_git(repo, "add", "-A")
    host_git(repo, "-c", "user.name=h", "-c", "user.email=h@h", "commit", "-qm", "host history")
    host_head = host_git(repo, "rev-parse", "HEAD").strip()
    for hook in ("pre-commit", "post-checkout", "post-commit"):
        script = repo / ".git" / "hooks" / hook
        script.write_text(f"#!/bin/sh\ntouch {marker}\n")
        script.chmod(0o755)

    # Even a policy that opts in to copying .git directories gets no host repository.
    policy = policy_with(repo, include_git_dir_read_only=True)
    async with Client(make_server(policy), mode="auto") as c:
        copied = await ok(c, "copy_in", {"root": "app", "to": "app"})
        sid = copied["session_id"]
        assert ".git: skipped, the copy gets a fresh git repository instead" in copied["skipped"]
        looked = await run(c, f"export HOST_HEAD={host_head}\n{BOX_LOOKS}", sid)
        assert looked["status"] == "ok", looked
        out = looked["stdout"]["text"]
        assert part(out, "config") == CONFIG.decode()
        assert part(out, "remotes") == ""
        found = part(out, "found").splitlines()
        assert found[0] == "exit 1"
        assert "No such file or directory" in found[1]
        assert found[2:] == ["no host commit", "1", "no token", "committed"]
        assert git_paths(looked) == []
        got = await ok(c, "get_patch", {"copy_id": copied["copy_id"], "session_id": sid})
        assert got["files"] == [] and got["refused"] == []
    assert not marker.exists()
    assert host_git(repo, "rev-parse", "HEAD").strip() == host_head


CROWD = r"""
set -e
cd app
mkdir pkg
for i in $(seq 10 24); do echo "changed $i" > "pkg/work$i.txt"; done
git add -A
find .git/objects -path '.git/objects/??/*' -type f | wc -l
"""


@pytest.mark.parametrize("sandbox_runtime", [GVISOR, RUNC])
async def test_gits_objects_never_crowd_the_work_out_of_the_file_cap(
    make_server: MakeServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    policy = {**policy_with(repo), "files": {"max_artifact_files": 20}}
    async with Client(make_server(policy), mode="auto") as c:
        copied = await ok(c, "copy_in", {"root": "app", "to": "app"})
        sid = copied["session_id"]
        # 15 files of work, 15 objects and an index of git's: 31 files for a cap of 20. The
        # work is in a directory a walk may reach after .git (gVisor lists names in order).
        crowded = await run(c, CROWD, sid)
        assert crowded["status"] == "ok", (crowded["stdout"], crowded["stderr"])
        assert int(crowded["stdout"]["text"]) >= 10
        assert {a["path"] for a in crowded["artifacts"]} == {
            f"app/pkg/work{i}.txt" for i in range(10, 25)
        }
        notes = "\n".join(crowded["notes"])
        assert "over the limit of 20 files" in notes
        kept = await run(c, "cat app/pkg/work*.txt | wc -l", sid)
        assert kept["stdout"]["text"].strip() == "15"

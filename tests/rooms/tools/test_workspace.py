"""The session workspace through the real MCP client and real Docker: versions and merges of
parallel calls, files that keep their modes, mtimes and directories, and every change
reported."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
import support
from mcp import MCPError
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from stores import query
from support import block_text, contents_text, embedded_blob, error_text, run_result

pytestmark = [pytest.mark.anyio]

MakeServer = Callable[..., MCPServer]
CALL_TIMEOUT_S = 240


async def run(client: Client, code: str, **args: Any) -> dict[str, Any]:
    """The structured result, with the text block the model reads as `_text`."""
    result = await run_result(client, code, within=CALL_TIMEOUT_S, **args)
    data: dict[str, Any] = result.structured_content
    data["_text"] = block_text(result)
    return data


LIST_TREE = """
import json, os, stat
out = {}
for root, dirs, files in os.walk('.'):
    for name in dirs + files:
        full = os.path.join(root, name)
        st = os.lstat(full)
        out[os.path.relpath(full)] = [oct(stat.S_IMODE(st.st_mode)), int(st.st_mtime),
                                       'dir' if stat.S_ISDIR(st.st_mode) else 'file']
print(json.dumps(out))
"""


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_sixteen_parallel_calls_merge_and_the_same_path_is_a_reported_conflict(
    make_server: MakeServer, data_dir: Path, database: str, request: pytest.FixtureRequest
) -> None:
    store = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    async with Client(make_server(store=store)) as client:
        first = await run(client, "open('shared.txt', 'w').write('shared')")
        session = first["session_id"]
        results: list[dict[str, Any]] = []

        async def one(i: int) -> None:
            code = (
                "import os\n"
                f"open('own-{i:02}.txt', 'w').write('{i}')\n"
                f"open('same.txt', 'w').write('written by call {i}')\n"
                "if os.path.exists('shared.txt'):\n"
                "    os.remove('shared.txt')\n"
            )
            results.append(await run(client, code, session_id=session))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
        listing = await run(client, "import os; print(sorted(os.listdir('.')))", session_id=session)

        assert all(r["status"] == "ok" for r in results), results
        expected = sorted([f"own-{i:02}.txt" for i in range(16)] + ["same.txt"])
        assert listing["stdout"]["text"] == f"{expected}\n"
        # Every call committed its own version on top of the first call's.
        versions = sorted(r["workspace_version"] for r in results)
        assert versions == list(range(first["workspace_version"] + 1, 18))
        for r in results:
            assert any(e["path"].startswith("own-") for e in r["changes"]["added"])
            started_with_shared = r["base_version"] == first["workspace_version"]
            assert ("shared.txt" in r["changes"]["deleted"]) == started_with_shared
            # A conflict on same.txt exactly when another call committed in between.
            between = [
                o
                for o in results
                if r["base_version"] < o["workspace_version"] < r["workspace_version"]
            ]
            conflicts = [c for c in r["conflicts"] if c["path"] == "same.txt"]
            assert bool(conflicts) == bool(between), r
            assert not [c for c in r["conflicts"] if c["path"] == "shared.txt"]
            for c in conflicts:
                assert c["kept"] == "this_run"
                assert c["other_run_id"] in {o["run_id"] for o in between}
                assert c["this_run"]["sha256"] != c["other"]["sha256"]
                assert 'stream="conflicts"' in r["_text"]
                # The overwritten version stays fetchable from the run that wrote it.
                with anyio.fail_after(CALL_TIMEOUT_S):
                    fetched = await client.call_tool(
                        "fetch_artifact", {"run_id": c["other_run_id"], "path": "same.txt"}
                    )
                assert fetched.structured_content is not None, fetched.content
                assert fetched.structured_content["sha256"] == c["other"]["sha256"]
        assert any(r["conflicts"] for r in results), "16 calls from one version never overlapped"
    # The deletion was applied once: one workspace version records it.
    deletions = query(
        store or data_dir / "airlock.db",
        "SELECT COUNT(*) FROM workspace_changes WHERE path = 'shared.txt' AND deleted = 1",
    )
    assert deletions == [(1,)]


async def test_modes_mtimes_and_empty_directories_survive_across_calls(
    make_server: MakeServer,
) -> None:
    code = (
        "import os\n"
        "open('s.sh', 'w').write('#!/bin/sh\\necho ran\\n')\n"
        "os.chmod('s.sh', 0o755)\n"
        "os.makedirs('empty/inner')\n"
        "os.mkdir('private', 0o700)\n"
        "open('private/key', 'w').write('k')\n"
        "os.chmod('private/key', 0o600)\n"
        "os.utime('private/key', (1600000000, 1600000000))\n"
        "open('suid', 'w').write('x')\n"
        "os.chmod('suid', 0o4755)\n"
    )
    async with Client(make_server()) as client:
        first = await run(client, code)
        session = first["session_id"]
        second = await run(client, "./s.sh", language="bash", session_id=session)
        tree = await run(client, LIST_TREE, session_id=session)
    added = {e["path"]: e for e in first["changes"]["added"]}
    assert added["s.sh"]["mode"] == "0755" and added["s.sh"]["kind"] == "file"
    assert added["empty/inner"] == {
        "path": "empty/inner",
        "kind": "dir",
        "size": 0,
        "sha256": None,
        "mode": "0755",
    }
    assert added["private"]["mode"] == "0700"
    assert added["suid"]["mode"] == "0755"
    assert any("suid: setuid, setgid and sticky bits are not kept" in n for n in first["notes"])
    assert second["stdout"]["text"] == "ran\n", second
    assert second["changes"] == {
        "added": [],
        "modified": [],
        "deleted": [],
        "counts": {"added": 0, "modified": 0, "deleted": 0},
        "truncated": False,
    }
    listed = json.loads(tree["stdout"]["text"])
    assert listed["s.sh"][0] == "0o755"
    assert listed["empty/inner"][2] == "dir"
    assert listed["private"][0] == "0o700"
    assert listed["private/key"][:2] == ["0o600", 1600000000]
    assert listed["suid"][0] == "0o755"


async def test_modifications_and_deletions_are_reported_in_both_result_forms(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        first = await run(
            client, "import os; os.mkdir('d'); open('d/a','w').write('1'); open('b','w').write('1')"
        )
        second = await run(
            client,
            "import os, shutil; open('d/a','w').write('2'); os.remove('b'); os.chmod('d', 0o750)",
            session_id=first["session_id"],
        )
    changes = second["changes"]
    assert [(e["path"], e["sha256"]) for e in changes["modified"]] == [
        ("d", None),
        ("d/a", hashlib.sha256(b"2").hexdigest()),
    ]
    assert changes["deleted"] == ["b"]
    assert changes["counts"] == {"added": 0, "modified": 2, "deleted": 1}
    text = second["_text"]
    assert "workspace version 1 -> 2: 0 added, 2 modified, 1 deleted, 0 conflict(s)" in text
    assert "~ d/a (1 bytes, mode 0644)" in text and "\n- b\n" in text
    assert 'stream="changes"' in text


async def test_a_file_and_a_directory_of_one_name_in_parallel_calls_do_not_brick_the_session(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        first = await run(client, "open('base.txt','w').write('b')")
        session = first["session_id"]
        results: dict[str, dict[str, Any]] = {}

        async def make(kind: str, code: str) -> None:
            results[kind] = await run(client, code, session_id=session)

        async with anyio.create_task_group() as tg:
            tg.start_soon(make, "file", "open('x','w').write('file')")
            tg.start_soon(make, "dir", "import os; os.mkdir('x'); open('x/y','w').write('dir')")
        after = await run(client, LIST_TREE, session_id=session)
    assert results["file"]["base_version"] == results["dir"]["base_version"], results
    later = max(results.values(), key=lambda r: r["workspace_version"])
    paths = {c["path"] for c in later["conflicts"]}
    assert "x" in paths, later["conflicts"]
    listed = json.loads(after["stdout"]["text"])
    assert after["status"] == "ok"
    if later is results["dir"]:
        assert listed["x"][2] == "dir" and "x/y" in listed
    else:
        assert listed["x"][2] == "file" and "x/y" not in listed
        # The file the directory held stays an artifact of the run that wrote it.
        assert "x/y" in paths


async def test_many_small_files_against_the_caps_keep_what_fits_and_delete_nothing(
    make_server: MakeServer,
) -> None:
    policy = {"files": {"max_workspace_entries": 300, "max_artifact_files": 100}}
    async with Client(make_server(policy)) as client:
        first = await run(client, "open('keep.txt','w').write('k')")
        session = first["session_id"]
        flood = await run(
            client,
            "import os\nos.remove('keep.txt')\n"
            "for i in range(2000): open(f'f{i:05}', 'w').write(str(i))",
            session_id=session,
        )
        after = await run(
            client,
            "import os; print(len(os.listdir('.')), os.path.exists('keep.txt'))",
            session_id=session,
        )
    assert flood["status"] == "ok"
    notes = "\n".join(flood["notes"])
    assert "more than 300 entries" in notes and "deleted nothing" in notes
    assert "over the limit of 100 files" in notes
    assert flood["changes"]["counts"] == {"added": 100, "modified": 0, "deleted": 0}
    assert flood["changes"]["truncated"] is False
    assert after["stdout"]["text"] == "101 True\n"


async def call(client: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    return await support.call(client, tool, args, within=CALL_TIMEOUT_S)


async def test_the_workspace_is_listed_and_read_without_running_code(
    make_server: MakeServer,
) -> None:
    blob = bytes(range(256)) * 40
    code = (
        "import os\n"
        "os.makedirs('src/empty')\n"
        "open('src/main.py','w').write('print(1)\\n' * 3000)\n"
        "open('data.bin','wb').write(bytes(range(256)) * 40)\n"
        "os.chmod('src/main.py', 0o755)\n"
    )
    async with Client(make_server()) as client:
        made = await run(client, code)
        session = made["session_id"]
        listed = await call(client, "list_workspace", {"session_id": session})
        page = await call(client, "list_workspace", {"session_id": session, "limit": 2})
        sub = await call(client, "list_workspace", {"session_id": session, "path": "src"})
        first = await call(
            client,
            "read_workspace_file",
            {"session_id": session, "path": "src/main.py", "max_bytes": 1000},
        )
        rest = await call(
            client,
            "read_workspace_file",
            {"session_id": session, "path": "src/main.py", "offset": 1000, "max_bytes": 100000},
        )
        binary = await call(
            client, "read_workspace_file", {"session_id": session, "path": "data.bin"}
        )
        with anyio.fail_after(CALL_TIMEOUT_S):
            resource = await client.read_resource(first.structured_content["uri"])
        await call(client, "end_session", {"session_id": session})
        with pytest.raises(MCPError, match="no file"), anyio.fail_after(CALL_TIMEOUT_S):
            await client.read_resource(first.structured_content["uri"])
    data = listed.structured_content
    assert data["version"] == made["workspace_version"]
    entries = {e["path"]: e for e in data["entries"]}
    assert sorted(entries) == ["data.bin", "src", "src/empty", "src/main.py"]
    main = entries["src/main.py"]
    assert (main["kind"], main["size"], main["mode"], main["written_by"]) == (
        "file",
        27000,
        "0755",
        made["run_id"],
    )
    assert main["sha256"] == hashlib.sha256(b"print(1)\n" * 3000).hexdigest()
    assert main["mtime"].endswith("Z")
    assert entries["src/empty"]["kind"] == "dir" and entries["src/empty"]["sha256"] is None
    assert 'stream="workspace"' in block_text(listed)
    assert (page.structured_content["total"], page.structured_content["next_offset"]) == (4, 2)
    assert [e["path"] for e in sub.structured_content["entries"]] == ["src/empty", "src/main.py"]
    got = first.structured_content
    assert (got["returned_bytes"], got["truncated"], got["mime_type"]) == (
        1000,
        True,
        "text/x-python",
    )
    assert "print(1)" in block_text(first) and "<untrusted-output" in block_text(first)
    assert rest.structured_content["returned_bytes"] == 26000
    assert rest.structured_content["truncated"] is False
    assert binary.structured_content["mime_type"] == "application/octet-stream"
    assert embedded_blob(binary)  # embedded, base64
    assert hashlib.sha256(blob).hexdigest() == binary.structured_content["sha256"]
    assert "print(1)" in contents_text(resource)


PATH_ATTACKS = ["../x", "/etc/passwd", "a/../../etc/passwd", "..", "x\x00y", "src/../../etc"]


async def test_workspace_paths_that_escape_are_refused_and_encoded_ones_are_just_names(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        made = await run(client, "import os; os.mkdir('src'); open('src/a','w').write('a')")
        session = made["session_id"]
        for path in PATH_ATTACKS:
            for tool in ("list_workspace", "read_workspace_file"):
                r = await call(client, tool, {"session_id": session, "path": path})
                text = error_text(r)
                assert "root:" not in text, (tool, path)
                assert any(w in text for w in ("'..'", "absolute", "control")), (tool, path, text)
        for path in ("%2e%2e/%2e%2e/etc/passwd", "..%2fetc%2fpasswd", "src%2fa"):
            r = await call(client, "read_workspace_file", {"session_id": session, "path": path})
            assert "no file" in error_text(r), path
        r = await call(client, "read_workspace_file", {"session_id": session, "path": "src"})
        assert "is a directory" in error_text(r)
        r = await call(client, "list_workspace", {"session_id": session, "path": "src/a"})
        assert "no directory" in error_text(r)
        for uri in (
            f"airlock://sessions/{session}/workspace/..%2F..%2Fetc%2Fpasswd",
            f"airlock://sessions/{session}/workspace/../../etc/passwd",
            f"airlock://sessions/{session}/workspace/%2Fetc%2Fpasswd",
            "airlock://sessions/../../workspace/etc/passwd",
        ):
            with pytest.raises(MCPError) as caught, anyio.fail_after(CALL_TIMEOUT_S):
                await client.read_resource(uri)
            assert "root:" not in str(caught.value), uri
        # The session still works.
        again = await run(client, "print(open('src/a').read())", session_id=session)
    assert again["stdout"]["text"] == "a\n"


async def test_call_files_that_clash_with_the_workspace_are_refused_naming_the_fix(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        made = await run(client, "import os; os.mkdir('d'); open('f','w').write('f')")
        session = made["session_id"]
        under_file = await call(
            client,
            "run_code",
            {"code": "1", "session_id": session, "files": [{"path": "f/x", "content": "x"}]},
        )
        over_dir = await call(
            client,
            "run_code",
            {"code": "1", "session_id": session, "files": [{"path": "d", "content": "x"}]},
        )
        both = await call(
            client,
            "run_code",
            {
                "code": "1",
                "files": [{"path": "p", "content": "x"}, {"path": "p/q", "content": "y"}],
            },
        )
        ok = await run(client, "import os; print(sorted(os.listdir('.')))", session_id=session)
    assert "'f' to be a directory, but it is a file" in error_text(under_file)
    assert "'d' is a directory in the session workspace" in error_text(over_dir)
    assert "also given as a file" in error_text(both)
    assert ok["stdout"]["text"] == "['d', 'f']\n"


@pytest.mark.docker  # unreadable to the box's user, who is not root
async def test_unreadable_files_and_directories_lose_nothing_and_block_no_deletion(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        first = await run(
            client,
            "import os\n"
            "os.mkdir('locked'); open('locked/x','w').write('inside')\n"
            "open('secret','w').write('s'); open('gone','w').write('g')",
        )
        session = first["session_id"]
        # Code makes a file and a directory unreadable to the runner and deletes another.
        second = await run(
            client,
            "import os; os.chmod('locked', 0); os.chmod('secret', 0); os.remove('gone')",
            session_id=session,
        )
        third = await run(
            client,
            "import os; os.chmod('locked', 0o755); os.chmod('secret', 0o644)\n"
            "print(open('locked/x').read(), open('secret').read(), os.path.exists('gone'))",
            session_id=session,
        )
    notes = "\n".join(second["notes"])
    assert "locked: unreadable directory" in notes
    assert "secret: unreadable" in notes
    assert second["changes"]["deleted"] == ["gone"]
    assert {e["path"]: e["mode"] for e in second["changes"]["modified"]} == {"locked": "0000"}
    assert third["stdout"]["text"] == "inside s False\n", third


async def test_ten_thousand_small_files_under_the_default_policy_keep_what_fits(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        first = await run(client, "open('keep.txt','w').write('k')")
        session = first["session_id"]
        flood = await run(
            client,
            "import os\nos.remove('keep.txt')\nos.mkdir('many')\n"
            "for i in range(10000): open(f'many/{i:05}', 'w').write(str(i))",
            session_id=session,
        )
        after = await run(
            client,
            "import os; print(len(os.listdir('many')), os.path.exists('keep.txt'))",
            session_id=session,
        )
        listed = await call(client, "list_workspace", {"session_id": session, "limit": 1})
    assert flood["status"] == "ok", flood["notes"]
    notes = "\n".join(flood["notes"])
    # The default caps: 512 files' contents per run; whatever is not kept is said so.
    assert "over the limit of 512 files" in notes
    kept = flood["changes"]["counts"]["added"]
    assert kept == 513  # the directory and 512 files
    assert flood["changes"]["truncated"] is True and len(flood["changes"]["added"]) == 100
    # Whether the listing of 10,001 entries fits the runner's report decides whether the
    # deletion of keep.txt can be trusted; either way the result says which happened.
    if "deleted nothing" in notes:
        assert after["stdout"]["text"] == "512 True\n"
    else:
        assert after["stdout"]["text"] == "512 False\n"
    assert listed.structured_content["total"] >= 513


async def test_a_store_failure_while_keeping_files_still_finishes_the_run_record(
    make_server: MakeServer, data_dir: Path
) -> None:
    async with Client(make_server()) as client:
        first = await run(client, "open('a','w').write('a')")
        with closing(sqlite3.connect(data_dir / "airlock.db")) as conn, conn:
            conn.execute("DROP TABLE workspace_changes")
        broken = await call(
            client,
            "run_code",
            {"code": "open('b','w').write('b')", "session_id": first["session_id"]},
        )
        assert broken.is_error
        with closing(sqlite3.connect(data_dir / "airlock.db")) as conn:
            rows = conn.execute(
                "SELECT status, error FROM runs WHERE session_id = ? ORDER BY created_at",
                (first["session_id"],),
            ).fetchall()
    assert [status for status, _ in rows] == ["ok", "error"]
    assert "the run finished, but keeping what it left failed" in rows[1][1]

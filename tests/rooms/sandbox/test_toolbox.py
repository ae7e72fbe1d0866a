"""What the default image offers agents, driven through run_code like a client would.

Packages from the lock import, the tools run, plots come back as pictures, installing
from an index at run time fails at once with a message that names the lock file (an
editable install of a project in /workspace works, offline, for the rest of the session),
every package client fails fast, and no cache comes back as an artifact.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent
from support import run_result

from airlock.sandbox.image import CLI_TOOLS, MANIFEST_PATH
from airlock.sandbox.pylock import default_lock
from airlock.tools.images import sniff_image

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MakeServer = Callable[..., MCPServer]


def images_of(result: Any) -> list[ImageContent]:
    return [block for block in result.content if isinstance(block, ImageContent)]


CHART = """
import time
import matplotlib.pyplot as plt
import pandas as pd
frame = pd.DataFrame({"x": range(10), "y": [v * v for v in range(10)]})
ax = frame.plot(x="x", y="y", figsize=(4, 3))
ax.figure.savefig("chart.png", dpi=100)
print(plt.get_backend())
"""


async def test_pandas_matplotlib_chart_comes_back_as_a_png_of_the_right_size(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        result = await run_result(client, CHART)
        data = result.structured_content
        assert data["status"] == "ok", data
        assert data["stdout"]["text"].strip().lower() == "agg"
        (image,) = images_of(result)
        assert image.mime_type == "image/png"
        png = base64.b64decode(image.data)
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert struct.unpack(">II", png[16:24]) == (400, 300)
        (artifact,) = [a for a in data["artifacts"] if a["path"] == "chart.png"]
        assert artifact["mime_type"] == "image/png"

        fetched = await client.call_tool(
            "fetch_artifact", {"run_id": data["run_id"], "path": "chart.png"}
        )
        assert not fetched.is_error
        (again,) = images_of(fetched)
        assert base64.b64decode(again.data) == png


async def test_jpeg_gif_and_webp_come_back_as_pictures_and_a_fake_png_does_not(
    make_server: MakeServer,
) -> None:
    code = """
from PIL import Image
picture = Image.new("RGB", (64, 48), (200, 30, 30))
for name in ("a.jpg", "b.gif", "c.webp"):
    picture.save(name)
open("fake.png", "w").write("not a picture, whatever the name says")
"""
    async with Client(make_server()) as client:
        result = await run_result(client, code)
    found = sorted(image.mime_type for image in images_of(result))
    assert found == ["image/gif", "image/jpeg", "image/webp"]
    for image in images_of(result):
        picture = sniff_image(base64.b64decode(image.data))
        assert picture is not None and (picture.width, picture.height) == (64, 48)
    kinds = {a["path"]: a["mime_type"] for a in result.structured_content["artifacts"]}
    assert kinds["fake.png"] == "application/octet-stream"


async def test_locked_packages_import_at_their_pinned_versions(make_server: MakeServer) -> None:
    code = """
import json
from importlib import metadata
import numpy, scipy, lxml.etree, pandas, matplotlib, PIL, yaml, bs4, openpyxl
import requests, httpx, pytest, scipy.linalg
import hypothesis, coverage, pytest_cov, xdist, mypy.api, ruff
import setuptools.build_meta, hatchling.build, flit_core.buildapi, editables
# The first of a name is the one imported: setuptools puts its vendored copies (an older
# packaging, ...) at the end of sys.path.
installed = {}
for d in metadata.distributions():
    installed.setdefault(d.metadata["Name"].lower(), d.version)
print(json.dumps(installed))
"""
    async with Client(make_server()) as client:
        result = await run_result(client, code)
    data = result.structured_content
    assert data["status"] == "ok", data["stderr"]
    installed = json.loads(data["stdout"]["text"])
    for entry in default_lock().entries:
        key = entry.name if entry.name in installed else entry.name.replace("-", "_")
        assert installed.get(key) == entry.version, entry.pin


async def test_git_commit_works_in_the_workspace(make_server: MakeServer) -> None:
    code = (
        "set -e; git init -q repo && cd repo && echo hi > a.txt && git add a.txt "
        "&& git commit -q -m first && git log --format='%an <%ae> %s'"
    )
    async with Client(make_server()) as client:
        result = await run_result(client, code, language="bash")
    data = result.structured_content
    assert data["status"] == "ok", data["stderr"]
    assert data["stdout"]["text"] == "Airlock sandbox <sandbox@airlock.invalid> first\n"


async def test_cli_tools_and_a_c_compiler_work(make_server: MakeServer) -> None:
    code = r"""
set -e
printf '#include <stdio.h>\nint main(void){puts("compiled");return 0;}\n' > h.c
gcc -o h h.c && ./h && rm h h.c
node -e 'console.log("node", 6 * 7)'
echo '{"a": [1, 2]}' | jq -c '.a'
sqlite3 :memory: 'select 40 + 2;'
for tool in TOOLS; do command -v "$tool" >/dev/null || echo "missing $tool"; done
""".replace("TOOLS", " ".join(CLI_TOOLS))
    async with Client(make_server()) as client:
        result = await run_result(client, code, language="bash")
    data = result.structured_content
    assert data["status"] == "ok", data["stderr"]
    assert data["stdout"]["text"] == "compiled\nnode 42\n[1,2]\n42\n"


async def test_pip_install_fails_at_once_naming_the_lock_file(make_server: MakeServer) -> None:
    code = """
import json, subprocess, time
started = time.monotonic()
done = subprocess.run(["pip", "install", "requests==2.0"], capture_output=True, text=True)
elapsed = time.monotonic() - started
# A venv's own pip is not the wrapper and not externally managed: /etc/pip.conf has no index.
venv = subprocess.run(
    "python3 -m venv /tmp/v && /tmp/v/bin/python -m pip install six",
    shell=True, capture_output=True, text=True,
)
print(json.dumps({"code": done.returncode, "elapsed": elapsed, "out": done.stdout + done.stderr,
                  "venv_code": venv.returncode, "venv_out": venv.stdout + venv.stderr}))
"""
    async with Client(make_server()) as client:
        result = await run_result(client, code, timeout_s=60)
    report = json.loads(result.structured_content["stdout"]["text"])
    assert report["code"] != 0
    assert "operator's lock file" in report["out"]
    assert report["elapsed"] < 2.0, report
    assert report["venv_code"] != 0
    assert "from versions: none" in report["venv_out"], report["venv_out"]


async def test_manifest_lists_python_packages_and_tools(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        result = await run_result(client, f"cat {MANIFEST_PATH}", language="bash")
    manifest = json.loads(result.structured_content["stdout"]["text"])
    assert manifest["python"].startswith("3.11.")
    pinned = {entry.name: entry.version for entry in default_lock().entries}
    listed = {name.lower().replace("_", "-"): v for name, v in manifest["python_packages"].items()}
    assert listed == pinned
    assert set(CLI_TOOLS) <= set(manifest["tools"])
    assert manifest["tools"]["node"].startswith("v")


async def test_run_code_description_summarizes_the_image(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        listed = await client.list_tools()
    (tool,) = [t for t in listed.tools if t.name == "run_code"]
    assert tool.description is not None
    numpy = next(e for e in default_lock().entries if e.name == "numpy")
    assert f"numpy {numpy.version}" in tool.description
    assert "git" in tool.description and "lock file" in tool.description
    assert isinstance(TextContent, type)


# Two src-layout projects, one per build backend (the setuptools one has a test suite whose
# conftest imports hypothesis; pytest collects it in a later run), and a flat one with only
# a setup.py.
EDITABLE_PROJECTS = r"""
set -e
mkdir -p st/src/st_pkg st/tests hat/src/hat_pkg old/old_pkg
echo 'VALUE = "setup.py"' > old/old_pkg/__init__.py
echo 'from setuptools import setup; setup(name="old-pkg", version="5", packages=["old_pkg"])' \
  > old/setup.py
echo 'VALUE = "setuptools"' > st/src/st_pkg/__init__.py
printf '%s\n' '[build-system]' 'requires = ["setuptools>=61"]' \
  'build-backend = "setuptools.build_meta"' '[project]' 'name = "st-pkg"' 'version = "1.2"' \
  'dependencies = ["requests-oauthlib"]' > st/pyproject.toml
echo 'import hypothesis' > st/tests/conftest.py
printf '%s\n' 'import st_pkg' 'def test_value():' '    assert st_pkg.VALUE == "setuptools"' \
  > st/tests/test_value.py
echo 'VALUE = "hatchling"' > hat/src/hat_pkg/__init__.py
printf '%s\n' '[build-system]' 'requires = ["hatchling"]' 'build-backend = "hatchling.build"' \
  '[project]' 'name = "hat-pkg"' 'version = "3.4"' > hat/pyproject.toml
pip install -q -e ./st -e old
cd hat && pip install -q -e . && echo installed
"""
LATER = r"""
set -e
python3 -c '
from importlib.metadata import version
import st_pkg, hat_pkg, old_pkg
print(st_pkg.VALUE, version("st-pkg"), hat_pkg.VALUE, version("hat-pkg"), old_pkg.VALUE)'
cd st && python3 -m pytest -q -p no:cacheprovider tests | tail -1
started=$(date +%s%N)
pip install requests-oauthlib || echo "refused in $(( ($(date +%s%N) - started) / 1000000 )) ms"
"""


async def test_editable_install_of_a_copied_project_works_offline_for_the_session(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        installed = (
            await run_result(client, EDITABLE_PROJECTS, language="bash")
        ).structured_content
        assert installed["status"] == "ok", installed["stderr"]
        assert installed["stdout"]["text"].endswith("installed\n")
        # The install is workspace files: it lasts as long as the session's files do.
        paths = {a["path"] for a in installed["artifacts"]}
        assert any(p.startswith(".editable/st_pkg-1.2.dist-info/") for p in paths), paths
        session = installed["session_id"]
        later = await run_result(client, LATER, language="bash", session_id=session)
    data = later.structured_content
    assert data["status"] == "ok", data["stderr"]
    out = data["stdout"]["text"].splitlines()
    assert out[0] == "setuptools 1.2 hatchling 3.4 setup.py"
    assert out[1].startswith("1 passed")
    assert out[2].startswith("refused in "), out
    assert int(out[2].split()[2]) < 2000, out
    assert "operator's lock file" in data["stderr"]["text"]
    assert "'requests-oauthlib'" in data["stderr"]["text"]


CACHES = r"""
import logging, os, subprocess
logging.basicConfig(level=logging.INFO)
cache = os.path.expanduser("~/.cache/matplotlib")
print("warm" if any(n.startswith("fontlist-") for n in os.listdir(cache)) else "cold")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.savefig("plot.png")
npm = subprocess.run(["npm", "--offline=false", "view", "left-pad"], capture_output=True)
print("npm", npm.returncode != 0, os.path.isdir(os.path.expanduser("~/.npm")))
"""


async def test_matplotlib_and_npm_leave_no_cache_among_the_artifacts(
    make_server: MakeServer,
) -> None:
    async with Client(make_server()) as client:
        data = (await run_result(client, CACHES, timeout_s=60)).structured_content
    assert data["status"] == "ok", data["stderr"]
    # The font list was built with the image: no run builds it again.
    assert data["stdout"]["text"] == "warm\nnpm True True\n", data["stderr"]
    assert "generated new fontManager" not in data["stderr"]["text"]
    assert [a["path"] for a in data["artifacts"]] == ["plot.png"]


# Each client, asked for a package from a registry with no network to reach one, must fail
# at once: the time each took, in ms, and its exit status.
CLIENTS = r"""
timed() {
    started=$(date +%s%N)
    "$@" > /tmp/out 2>&1
    status=$?
    echo "$(( ($(date +%s%N) - started) / 1000000 )) $status $*"
    tail -n 3 /tmp/out >&2
}
timed npm install left-pad
timed npm --offline=false view left-pad
timed npm --offline=false install --prefer-online left-pad
timed pip download six
timed python3 -m pip install --target /tmp/t --index-url https://pypi.org/simple six
timed git clone -q https://github.com/psf/requests /tmp/requests
timed curl -sS https://pypi.org/simple/six/
timed wget -q https://registry.npmjs.org/left-pad
timed npx --offline=false --yes left-pad
"""


async def test_every_package_client_fails_fast_without_a_network(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        data = (
            await run_result(client, CLIENTS, language="bash", timeout_s=120)
        ).structured_content
    assert data["status"] == "ok", data
    lines = [line.split(" ", 2) for line in data["stdout"]["text"].splitlines()]
    assert len(lines) == 9, data
    for elapsed, status, command in lines:
        assert status != "0", (command, data["stderr"]["text"])
        # npm alone takes 2-4 s to start on a loaded 2-core machine; its retries took 73 s.
        assert int(elapsed) < 30_000, (command, elapsed, data["stderr"]["text"])
    assert "cannot be installed inside an Airlock sandbox" in data["stderr"]["text"]

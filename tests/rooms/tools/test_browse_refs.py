"""browse's accessibility snapshot and its refs, end to end: real Chromium in the real browser
image, under runc and runsc, against a real local HTTPS server (`trustme`). A ref acts on
its element or fails in words; it never lands somewhere else.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent
from support import text_of
from test_browse import call, grant, serve, site_server
from upstream import Upstream

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.usefixtures("browser_image")]
__all__ = ["site_server"]

FORM = """<title>form</title><h1>Sign in</h1>
<label>User <input id="user" name="user"></label>
<label>Secret word <input id="word" name="word"></label>
<label><input type="checkbox" id="keep" checked> keep me</label>
<select id="color"><option value="r">red</option><option value="g">green</option></select>
<button id="go" onclick="document.title = 'clicked ' + user.value + '/' + word.value
  + '/' + color.value">Go</button>
<a href="/next">next page</a>
<div id="cover" style="display:none; position:fixed; inset:0; background:white"></div>
<button id="hidden-behind" onclick="document.title = 'behind'">Behind</button>"""


def ref_of(snapshot: str, line_start: str) -> str:
    """The ref on the snapshot's first line that starts (after its indent) with `line_start`."""
    for line in snapshot.splitlines():
        if line.strip().startswith(line_start):
            found = re.search(r"\[ref=(e\d+)\]", line)
            assert found, line
            return found.group(1)
    raise AssertionError(f"no line starts with {line_start!r} in:\n{snapshot}")


async def test_the_snapshot_names_roles_states_and_refs_and_screenshot_false_skips_the_png(
    site_server: MCPServer, upstream: Upstream
) -> None:
    url = serve(upstream, "/form", FORM)
    async with Client(site_server) as c:
        cap = await grant(c)
        result = await call(c, "browse", {"url": url, "capabilities": [cap], "screenshot": False})
    data = result.structured_content
    assert data is not None and data["status"] == "ok", text_of(result)
    tree = data["snapshot"]
    assert '- heading "Sign in" [level=1]' in tree, tree
    assert not [b for b in result.content if isinstance(b, ImageContent)]
    assert data["screenshot_uri"] is None
    assert 'stream="snapshot"' in text_of(result)
    refs = [ref_of(tree, line) for line in ('- textbox "User"', '- button "Go"', '- link "next')]
    assert len(set(refs)) == 3
    assert "[checked]" in next(line for line in tree.splitlines() if "keep me" in line)
    assert not data["snapshot_truncated"] and data["snapshot_nodes"] > 10


async def test_selector_actions_type_select_click_and_walk_the_history(
    site_server: MCPServer, upstream: Upstream
) -> None:
    url = serve(upstream, "/form", FORM)
    serve(upstream, "/next", "<title>next</title><p>the next page</p>")
    actions: list[dict[str, Any]] = [
        {"kind": "type", "selector": "#user", "text": "alice"},
        {"kind": "type", "selector": "#word", "text": "swordfish"},
        {"kind": "select", "selector": "#color", "value": "green"},
        {"kind": "hover", "selector": "#go"},
        {"kind": "click", "selector": "#go"},
        {"kind": "scroll_into_view", "selector": "a"},
        {"kind": "click", "selector": "a"},
        {"kind": "back"},
        {"kind": "forward"},
        {"kind": "reload"},
    ]
    async with Client(site_server) as c:
        cap = await grant(c)
        result = await call(c, "browse", {"url": url, "capabilities": [cap], "actions": actions})
    data = result.structured_content
    assert data is not None and data["status"] == "ok", text_of(result)
    assert data["actions_done"] == len(actions), data["error"]
    assert data["title"] == "next" and "- paragraph" in data["snapshot"]
    assert [b for b in result.content if isinstance(b, ImageContent)]
    # Two loads of /next (the click and the reload); forward may come from the cache.
    assert upstream.paths().count("/next") >= 2


async def test_a_stale_ref_and_a_covered_element_fail_in_words_and_click_nothing(
    site_server: MCPServer, upstream: Upstream
) -> None:
    url = serve(upstream, "/form", FORM)
    cover = "document.getElementById('cover').style.display = 'block'"
    covered = serve(upstream, "/covered", FORM + f"<script>{cover}</script>")
    async with Client(site_server) as c:
        cap = await grant(c)
        # A fresh browser has no refs: a ref of another browse is stale here.
        stale = await call(
            c,
            "browse",
            {"url": url, "capabilities": [cap], "actions": [{"kind": "click", "ref": "e1"}]},
        )
        behind = [{"kind": "click", "selector": "#hidden-behind"}]
        refused = await call(
            c, "browse", {"url": covered, "capabilities": [cap], "actions": behind}
        )
    data = stale.structured_content
    assert data is not None and data["actions_done"] == 0 and data["title"] == "form"
    assert "ref e1 is stale: its element is no longer on the page" in data["error"]
    data = refused.structured_content
    assert data is not None and data["actions_done"] == 0, text_of(refused)
    assert "is covered by div#cover at its centre; did not click it" in data["error"]
    assert data["title"] == "form"


async def test_a_page_of_50000_nodes_gives_a_capped_snapshot_that_says_so(
    site_server: MCPServer, upstream: Upstream
) -> None:
    many = "<script>const l = document.createElement('ul'); for (let i = 0; i < 50000; i++)"
    many += " { const e = document.createElement('li'); e.textContent = 'item ' + i;"
    many += " l.appendChild(e); } document.body.appendChild(l);</script>"
    url = serve(upstream, "/many", f"<title>many</title><body>{many}</body>")
    async with Client(site_server) as c:
        cap = await grant(c)
        result = await call(c, "browse", {"url": url, "capabilities": [cap], "screenshot": False})
    data = result.structured_content
    assert data is not None and data["status"] == "ok", text_of(result)
    assert data["snapshot_truncated"] and data["snapshot_nodes"] >= 50_000
    assert data["snapshot"] == ""
    assert "elements, too many for a snapshot: none was taken" in text_of(result)

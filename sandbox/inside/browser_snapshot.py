"""The page's accessibility snapshot with element refs, and the world actions run in.

Belongs here: reading Chromium's accessibility tree (`Accessibility.getFullAXTree`) as
indented text, one node a line (role, quoted name, state, `[ref=eN]` for every element an
action can target), capped at a number of lines; the refs themselves (`Refs`: one counter
per browser, so a ref is never given to another element, and each bound to the document it
was seen in, so a ref of a page that has gone resolves to nothing); and our own isolated
world per document. Does not belong here: performing actions (`browser_actions`).

Every name, value and description is the page's: the host sanitizes and caps the text and
returns it inside the untrusted envelope. Names are JSON-quoted (a newline in one cannot
start a line of its own) and a `[ref=` inside one is written `(ref=`, so a page cannot
draw a ref next to an element that is not its.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .browser_page import Page

MAX_NAME_CHARS = 200
MAX_ELEMENTS = 5000
# Roles an action targets (click, type, select, ...); any focusable element gets a ref too.
ACTIONABLE = frozenset(
    {
        *("button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox"),
        *("listbox", "option", "menuitem", "menuitemcheckbox", "menuitemradio", "tab"),
        *("switch", "slider", "spinbutton", "treeitem", "PopUpButton"),
        *("ToggleButton", "gridcell", "columnheader", "rowheader"),
    }
)
# Nodes that say nothing of their own: not shown, their children in their place.
LEFT_OUT = frozenset({"InlineTextBox", "LineBreak"})
PLAIN = frozenset({"generic", "none", "presentation", "RootWebArea", "group", "Section"})
# States shown bare when true, and those shown with their value.
FLAGS = ("focused", "disabled", "selected", "required", "readonly", "multiselectable")
VALUED = ("checked", "pressed", "expanded", "level", "invalid")


class Refs:
    """The refs of one browser: `eN` for the Nth element any snapshot named, each bound to
    (the document it was seen in, its DOM node)."""

    def __init__(self) -> None:
        self._count = 0
        self._by_node: dict[tuple[str, int], str] = {}
        self._nodes: dict[str, tuple[str, int]] = {}

    def ref_of(self, document: str, node: int) -> str:
        key = (document, node)
        ref = self._by_node.get(key)
        if ref is None:
            self._count += 1
            ref = self._by_node[key] = f"e{self._count}"
            self._nodes[ref] = key
        return ref

    def node_of(self, ref: str, document: str) -> int | None:
        """The DOM node of `ref` if it was seen in `document` (the page now shown)."""
        found = self._nodes.get(ref)
        if found is None or found[0] != document:
            return None
        return found[1]


def world_of(page: Page) -> int:
    """Our own isolated world in the page's current document (made once per document):
    the page's scripts share its DOM but not its JavaScript."""
    if page.world is None or page.world[0] != page.loader:
        frame = page.cdp.call("Page.getFrameTree", {}, page.session)["frameTree"]["frame"]
        made = {"frameId": frame["id"], "worldName": "airlock"}
        world = page.cdp.call("Page.createIsolatedWorld", made, page.session)
        page.world = (page.loader, int(world["executionContextId"]))
    return page.world[1]


def snapshot(page: Page, refs: Refs, max_lines: int) -> dict[str, Any]:
    """The page's tree as text, at most `max_lines` lines; fields of `page.json`.

    Chromium builds the whole tree for `getFullAXTree` (about 0.3 ms a node here, five
    nodes an element for a list), so a page of more than MAX_ELEMENTS elements gets no
    tree at all, and says how many it has, rather than spending the browse's time on it."""
    count = {"expression": "document.getElementsByTagName('*').length", "returnByValue": True}
    count["contextId"] = world_of(page)
    elements = page.cdp.call("Runtime.evaluate", count, page.session).get("result", {})
    if int(elements.get("value") or 0) > MAX_ELEMENTS:
        return {"snapshot": "", "snapshot_truncated": True, "snapshot_nodes": elements["value"]}
    nodes = page.cdp.call("Accessibility.getFullAXTree", {}, page.session).get("nodes", [])
    by_id = {str(n.get("nodeId")): n for n in nodes}
    lines: list[str] = []
    truncated = False
    # Depth first, by hand: a page may nest deeper than Python's recursion limit.
    pending: list[tuple[dict[str, Any], int, str]] = [(nodes[0], 0, "")] if nodes else []
    while pending:
        node, depth, parent_name = pending.pop()
        line, name = _line(node, depth, parent_name, refs, page.loader)
        if line is not None:
            if len(lines) >= max_lines:
                truncated = True
                break
            lines.append(line)
        inner = depth + (line is not None)
        children = [by_id[str(c)] for c in node.get("childIds", []) if str(c) in by_id]
        pending.extend((child, inner, name or parent_name) for child in reversed(children))
    return {
        "snapshot": "\n".join(lines),
        "snapshot_truncated": truncated,
        "snapshot_nodes": len(nodes),
    }


def _line(
    node: dict[str, Any], depth: int, parent_name: str, refs: Refs, document: str
) -> tuple[str | None, str]:
    """The node's line (None when it is not shown) and its name."""
    role = str(_value(node.get("role")) or "")
    name = " ".join(str(_value(node.get("name")) or "").split())
    if node.get("ignored") or role in LEFT_OUT:
        return None, ""
    if role == "StaticText":
        if not name or name == parent_name:
            return None, ""
        return f"{'  ' * depth}- text {_quoted(name)}", name
    properties = {
        str(p.get("name")): _value(p.get("value")) for p in node.get("properties", []) or []
    }
    actionable = role in ACTIONABLE or properties.get("focusable") is True
    if role == "RootWebArea" or (role in PLAIN and not name and not actionable):
        return None, ""
    parts = [f"{'  ' * depth}- {role}"]
    if name:
        parts.append(_quoted(name))
    for flag in FLAGS:
        if properties.get(flag) is True:
            parts.append(f"[{flag}]")
    for key in VALUED:
        found = properties.get(key)
        if found not in (None, False, "false", ""):
            parts.append(f"[{key}]" if found is True or found == "true" else f"[{key}={found}]")
    backend = node.get("backendDOMNodeId")
    if actionable and isinstance(backend, int):
        parts.append(f"[ref={refs.ref_of(document, backend)}]")
    value = " ".join(str(_value(node.get("value")) or "").split())
    line = " ".join(parts) + (f": {_quoted(value)}" if value else "")
    return line, name


def _value(field: Any) -> Any:
    return field.get("value") if isinstance(field, dict) else None


def _quoted(text: str) -> str:
    cut = text[:MAX_NAME_CHARS] + ("..." if len(text) > MAX_NAME_CHARS else "")
    return json.dumps(cut.replace("[ref=", "(ref="), ensure_ascii=False)

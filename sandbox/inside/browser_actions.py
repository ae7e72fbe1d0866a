"""The actions of a browse, performed on its page: what each `kind` does over DevTools.

Belongs here: finding an action's element (a CSS selector in the page, or a ref of the
snapshot, `browser_snapshot`), the input events of click, type, press, select, hover and
scroll, the history steps (back, forward, reload), and waiting for a navigation an action
started. An element a ref names is looked at in a world of our own (the page's scripts
share its DOM, not its JavaScript): gone is a stale ref, covered by another element at
its centre is refused, and neither ever becomes a click somewhere else. Does not belong
here: the page's events (`browser_page`), reading the page (`browser`).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import json
import time

from .browser_snapshot import world_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .browser_page import Page
    from .browser_snapshot import Refs

KEYS = {
    "Enter": ("\r", 13),
    "Tab": ("\t", 9),
    "Escape": ("", 27),
    "Backspace": ("", 8),
    "ArrowUp": ("", 38),
    "ArrowDown": ("", 40),
    "ArrowLeft": ("", 37),
    "ArrowRight": ("", 39),
    "PageDown": ("", 34),
    "PageUp": ("", 33),
    "Home": ("", 36),
    "End": ("", 35),
}
MOUSE_EVENTS = {
    "click": ("mouseMoved", "mousePressed", "mouseReleased"),
    "hover": ("mouseMoved",),
}
# After an action, a navigation it started is waited for this long, then its fetches.
NAVIGATION_S = 10.0
SETTLE_S = 2.0
AFTER_ACTION_S = 0.1
# How long a navigation the page asked for may take to send its document's request.
NAVIGATION_START_S = 5.0

# Run on the element itself (`this`), in our own world: where to click it, or why not.
_PLACE = """function(scroll) {
  if (!this.isConnected) return {gone: true};
  if (scroll) this.scrollIntoView({block: 'center', inline: 'center'});
  const r = this.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) return {hidden: true};
  const x = r.x + r.width / 2, y = r.y + r.height / 2;
  const root = this.getRootNode();
  const top = (root.elementFromPoint ? root : document).elementFromPoint(x, y);
  if (top && top !== this && !this.contains(top) && !(top.control === this)) {
    const id = top.id ? '#' + top.id : '';
    return {covered: (top.tagName || 'an element').toLowerCase() + id, x: x, y: y};
  }
  return {x: x, y: y};
}"""
_FOCUS = "function() { if (!this.isConnected) return false; this.focus(); return true; }"
_SELECT = """function(wanted) {
  if (!this.isConnected) return 'gone';
  if (this.tagName !== 'SELECT') return 'not a select element';
  const option = Array.from(this.options).find(o => o.value === wanted)
    || Array.from(this.options).find(o => o.label.trim() === wanted);
  if (!option) return 'no option with that value or label';
  this.value = option.value;
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  return '';
}"""


def evaluate(page: Page, expression: str, context: int | None = None) -> Any:
    params: dict[str, Any] = {"expression": expression, "returnByValue": True}
    params["awaitPromise"] = True
    if context is not None:
        params["contextId"] = context
    result = page.cdp.call("Runtime.evaluate", params, page.session)
    if "exceptionDetails" in result:
        raise ValueError(result["exceptionDetails"].get("text", "the page's script failed"))
    return result.get("result", {}).get("value")


class Actor:
    """Performs the actions of one browser's page; `refs` are its snapshots' refs."""

    def __init__(self, page: Page, refs: Refs) -> None:
        self.page = page
        self.refs = refs

    def act(self, action: dict[str, Any]) -> None:
        """One action (validated on the host); a failure raises and ends the actions."""
        page, kind = self.page, action["kind"]
        before, asked, ended = page.document, page.navigations, page.navigations_ended
        if kind in ("click", "hover"):
            x, y = self._place(action, f"{kind} it")
            for event in MOUSE_EVENTS[kind]:
                button = "none" if event == "mouseMoved" else "left"
                params = {"type": event, "x": x, "y": y, "button": button, "clickCount": 1}
                page.cdp.call("Input.dispatchMouseEvent", params, page.session)
        elif kind == "type":
            self._focus(action)
            page.cdp.call("Input.insertText", {"text": action["text"]}, page.session)
        elif kind == "press":
            self._focus(action)
            self._press(action["key"])
        elif kind == "select":
            why = self._call(action, _SELECT, [action["value"]])
            if why:
                raise LookupError(f"cannot select {action['value']!r}: {why}")
        elif kind == "scroll_into_view":
            self._place(action, "scroll to it", covered_ok=True)
        elif kind == "wait_for":
            self._wait_for(action["selector"], int(action["timeout_ms"]))
        elif kind == "wait":
            page.cdp.pump(lambda: False, until=time.monotonic() + int(action["ms"]) / 1000)
        elif kind == "scroll":
            params = {"type": "mouseWheel", "x": 1, "y": 1, "deltaY": int(action["dy"])}
            params["deltaX"] = int(action.get("dx", 0))
            page.cdp.call("Input.dispatchMouseEvent", params, page.session)
        elif kind in ("back", "forward"):
            self._history(1 if kind == "forward" else -1)
        elif kind == "reload":
            page.cdp.call("Page.reload", {}, page.session)
        page.cdp.pump(lambda: False, until=time.monotonic() + AFTER_ACTION_S)
        if page.navigations > asked:
            # The page asked for a navigation whose document request may come later than
            # AFTER_ACTION_S (often so under gVisor): read now, and the read would be of the
            # page being left, cut off mid-read when the new one replaces it.
            page.cdp.pump(
                lambda: page.document != before or page.navigations_ended > ended,
                until=time.monotonic() + NAVIGATION_START_S,
            )
        if page.document != before:
            self.settle()

    def settle(self) -> None:
        """Wait for the main frame's latest document to load (at most NAVIGATION_S), then
        for its fetches (at most SETTLE_S)."""
        page = self.page
        seen = page.lifecycle_seen

        # The latest document's, looked up each time: a page that moves on before its load
        # (a redirect by script, as after a sign-in) is waited for where it ends up.
        def ended() -> bool:
            loaded = (page.document_loader, "load") in seen
            return loaded or page.crashed or bool(page.failed or page.refused)

        page.cdp.pump(ended, until=time.monotonic() + NAVIGATION_S)
        if not (page.failed or page.refused):
            page.settle(time.monotonic() + SETTLE_S)

    def _history(self, step: int) -> None:
        page = self.page
        history = page.cdp.call("Page.getNavigationHistory", {}, page.session)
        index = int(history["currentIndex"]) + step
        entries = history["entries"]
        if not 0 <= index < len(entries):
            raise LookupError("there is no page " + ("after" if step > 0 else "before") + " this")
        entry = {"entryId": entries[index]["id"]}
        page.cdp.call("Page.navigateToHistoryEntry", entry, page.session)

    def _press(self, key: str) -> None:
        text, code = KEYS[key]
        for event in ("keyDown", "keyUp"):
            params = {"type": event, "key": key, "windowsVirtualKeyCode": code}
            if text and event == "keyDown":
                params["text"] = text
            self.page.cdp.call("Input.dispatchKeyEvent", params, self.page.session)

    def _focus(self, action: dict[str, Any]) -> None:
        if action.get("ref") or action.get("selector"):
            self._place(action, "type into it", covered_ok=True)
            if not self._call(action, _FOCUS, []):
                raise LookupError(self._gone(action))

    def _place(
        self, action: dict[str, Any], doing: str, *, covered_ok: bool = False
    ) -> tuple[float, float]:
        """Scroll the action's element into view; its centre, unless it is covered."""
        found = self._call(action, _PLACE, [True])
        if not isinstance(found, dict) or found.get("gone"):
            raise LookupError(self._gone(action))
        if found.get("hidden"):
            raise LookupError(f"{self._named(action)} has no size on the page; cannot {doing}")
        if found.get("covered") and not covered_ok:
            raise LookupError(
                f"{self._named(action)} is covered by {str(found['covered'])[:80]} at its "
                f"centre; did not {doing} (close what covers it, or take a fresh snapshot)"
            )
        return float(found["x"]), float(found["y"])

    def _call(self, action: dict[str, Any], function: str, args: list[Any]) -> Any:
        """`function` called on the action's element, in our own world."""
        page = self.page
        world = world_of(page)
        if action.get("ref"):
            node = self.refs.node_of(str(action["ref"]), page.loader)
            if node is None:
                raise LookupError(self._gone(action))
            try:
                resolved = page.cdp.call(
                    "DOM.resolveNode",
                    {"backendNodeId": node, "executionContextId": world},
                    page.session,
                )
            except RuntimeError:
                raise LookupError(self._gone(action)) from None
            target = resolved["object"]["objectId"]
        else:
            selector = json.dumps(action["selector"])
            found = page.cdp.call(
                "Runtime.evaluate",
                {"expression": f"document.querySelector({selector})", "contextId": world},
                page.session,
            )
            target = found.get("result", {}).get("objectId")
            if not target:
                raise LookupError(f"no element matches the selector {action['selector']!r}")
        answer = page.cdp.call(
            "Runtime.callFunctionOn",
            {
                "functionDeclaration": function,
                "objectId": target,
                "arguments": [{"value": a} for a in args],
                "returnByValue": True,
            },
            page.session,
        )
        if "exceptionDetails" in answer:
            raise ValueError(answer["exceptionDetails"].get("text", "the element's call failed"))
        return answer.get("result", {}).get("value")

    def _wait_for(self, selector: str, limit: int) -> None:
        found = evaluate(
            self.page,
            f"new Promise(done => {{ const s = {json.dumps(selector)}, t0 = Date.now();"
            " const look = () => document.querySelector(s) ? done(true)"
            f" : Date.now() - t0 > {limit} ? done(false) : setTimeout(look, 50); look(); }})",
            world_of(self.page),
        )
        if not found:
            raise LookupError(f"no element matched {selector!r} within {limit} ms")

    @staticmethod
    def _named(action: dict[str, Any]) -> str:
        if action.get("ref"):
            return f"ref {action['ref']}"
        return f"the element of {action['selector']!r}"

    @staticmethod
    def _gone(action: dict[str, Any]) -> str:
        if action.get("ref"):
            return (
                f"ref {action['ref']} is stale: its element is no longer on the page; take a "
                "fresh snapshot and use its refs"
            )
        return f"no element matches the selector {action['selector']!r}"

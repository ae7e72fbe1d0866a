"""The drill's kept-browser probe: session B cannot reach session A's kept browser.

Session A keeps a browser on a page of the drill's own site (`drill_browser.serving`),
which sets a cookie of the drill's (random per drill). Session B, of the same tenant (the
closest a stranger gets), then presents A's `browser_id` to act on it and to close it:
each must get the very refusal an id nobody ever kept gets, with nothing of A's page
(its title, its cookie) in it. B's own browse of the same page must arrive without A's
cookie, and A's browser must still be open afterwards, still carrying the cookie when it
goes back to the page. Judged from the host's side: what the tools answered and the
Cookie headers the drill's site received.

Belongs here: the probe and its judge. Does not belong here: the site (`drill_browser`),
the table (`drill`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.client import Client
from mcp.types import CallToolResult

from airlock.errors import AirlockError
from airlock.policies import Policy

from .drill_browser import KEPT_PAGE, KEPT_PATH, PAGE_CAPABILITY, Call, serving, tricks_policy
from .drill_probes import Verdict, result_text

KEPT_ATTACK = "browser: another session's kept browser"
KEPT_EXPECTED = (
    "its browser_id refused as an unknown one, nothing of its page or cookie reaches the "
    "other session, and it stays open for its own"
)
_TITLE = re.search(r"<title>(.*)</title>", KEPT_PAGE)
KEPT_TITLE = _TITLE.group(1) if _TITLE else ""


@dataclass(frozen=True)
class KeptFacts:
    """What each call answered (text, with the ids in it replaced by `ID`) and what the
    drill's site received."""

    cookie: str
    unknown: tuple[bool, str]
    foreign: tuple[bool, str]
    foreign_close: tuple[bool, str]
    fresh_cookies: list[str]
    still_open: bool
    owner_cookies: list[str]


def judge_kept(facts: KeptFacts) -> Verdict:
    """Held when B's two calls with A's id got the unknown id's refusal, free of A's page,
    B's page arrived without A's cookie, and A's browser outlived B's attempts."""
    failures = []
    is_error, refusal = facts.unknown
    if not is_error:
        failures.append("an id nobody kept was accepted")
    for what, (foreign_error, text) in (
        ("acting on", facts.foreign),
        ("closing", facts.foreign_close),
    ):
        if not foreign_error:
            failures.append(f"session B succeeded {what} A's browser")
        elif text != refusal:
            failures.append(f"{what} A's browser was refused differently from an unknown id")
        value = facts.cookie.partition("=")[2]
        if value in text or KEPT_TITLE in text:
            failures.append(f"B's answer {what} A's browser showed A's page or cookie")
    if not facts.fresh_cookies or any(facts.cookie in c for c in facts.fresh_cookies):
        failures.append("session B's own browse carried A's cookie (or never arrived)")
    if not facts.still_open:
        failures.append("A's browser did not outlive B's attempts")
    elif not any(facts.cookie in c for c in facts.owner_cookies):
        failures.append("A's browser lost its own cookie")
    if failures:
        return Verdict("; ".join(failures), False)
    return Verdict(
        "B's acting on and closing A's browser got the unknown id's refusal, with nothing "
        "of A's page; B's own page came without A's cookie; A's browser stayed open with it",
        True,
    )


def _answer(result: CallToolResult, ids: list[str]) -> tuple[bool, str]:
    text = result_text(result)
    for shown in ids:
        text = text.replace(repr(shown), "ID").replace(shown, "ID")
    return bool(result.is_error), text


async def kept_browser(
    make_client: Callable[[Policy], Client], policy: Policy, call: Call, sessions: list[str]
) -> Verdict:
    """Run the probe on a server of the drill's own (the policy plus its page capability)."""
    if policy.browser.max_kept == 0:
        return Verdict("keeping a browser is off ([browser] max_kept = 0): nothing to reach", None)
    with serving() as site:
        async with make_client(tricks_policy(policy, site.port)) as client:
            url = f"http://127.0.0.1:{site.port}{KEPT_PATH}"
            a = await _granted(client, call)
            b = await _granted(client, call)
            sessions += [a[0], b[0]]
            try:
                return await _probe(client, call, site.cookie, url, a, b, site.kept_cookies)
            finally:
                for session, _ in (a, b):
                    await call(client, "end_session", {"session_id": session})


async def _granted(client: Client, call: Call) -> tuple[str, str]:
    """A new session holding the drill's page capability: (session id, capability id)."""
    granted = await call(
        client,
        "request_capability",
        {"capability": PAGE_CAPABILITY, "reason": "drill", "session_id": "new"},
    )
    data: dict[str, Any] = dict(granted.structured_content or {})
    if granted.is_error or "capability_id" not in data:
        raise AirlockError(f"the drill could not grant {PAGE_CAPABILITY}: {result_text(granted)}")
    return str(data["session_id"]), str(data["capability_id"])


async def _probe(
    client: Client,
    call: Call,
    cookie: str,
    url: str,
    a: tuple[str, str],
    b: tuple[str, str],
    kept_cookies: list[str],
) -> Verdict:
    quiet = {"screenshot": False}
    opened = await call(
        client,
        "browse",
        {"url": url, "capabilities": [a[1]], "keep": True, "session_id": a[0]} | quiet,
    )
    browser_id = str((opened.structured_content or {}).get("browser_id") or "")
    if opened.is_error or not browser_id:
        shown = result_text(opened)[:200]
        return Verdict(f"session A could not keep a browser on the drill's page: {shown}", False)
    nobodys = "brw_" + secrets.token_hex(13)
    ids = [browser_id, nobodys]
    on_b = {"session_id": b[0]}
    unknown = await call(client, "browse", {"browser_id": nobodys} | on_b)
    foreign = await call(client, "browse", {"browser_id": browser_id} | on_b)
    foreign_close = await call(client, "browse", {"browser_id": browser_id, "close": True} | on_b)
    before = len(kept_cookies)
    await call(client, "browse", {"url": url, "capabilities": [b[1]]} | on_b | quiet)
    fresh = kept_cookies[before:]
    before = len(kept_cookies)
    still = await call(
        client, "browse", {"browser_id": browser_id, "url": url, "session_id": a[0]} | quiet
    )
    still_open = not still.is_error and bool((still.structured_content or {}).get("browser_open"))
    return judge_kept(
        KeptFacts(
            cookie=cookie,
            unknown=_answer(unknown, ids),
            foreign=_answer(foreign, ids),
            foreign_close=_answer(foreign_close, ids),
            fresh_cookies=fresh,
            still_open=still_open,
            owner_cookies=kept_cookies[before:],
        )
    )

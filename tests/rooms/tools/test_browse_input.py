"""browse's input checks, with no engine: the URL and the actions, each refusal one sentence."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.errors import InvalidRequest, LimitExceeded
from airlock.tools.browse_input import MAX_ACTIONS, check_actions, check_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///etc/passwd", "must start with http:// or https://"),
        ("chrome://version", "must start with http:// or https://"),
        ("view-source:https://x/", "must start with http:// or https://"),
        ("data:text/html,hi", "must start with http:// or https://"),
        ("javascript:alert(1)", "must start with http:// or https://"),
        ("https:///path", "has no host"),
        ("https://user:pw@example.com/", "must not carry credentials"),
        ("https://example.com/a b", "spaces or control characters"),
        ("https://example.com/\x00", "spaces or control characters"),
        ("https://example.com/" + "a" * 2100, "over 2048 characters"),
        # One parser, the proxy's, reads the host and port: what passes, the proxy takes.
        ("http://[v1.x]/", '"[v1.x]" is not a valid IPv6 address'),
        ("https://localhost:99999/", "the port '99999' is not a decimal number from 1 to 65535"),
        ("https://localhost:/", "the port '' is not a decimal number"),
        ("https://[::1/", "url cannot be read (Invalid IPv6 URL)"),
        ("https://127.1/", '"127.1" is not an IPv4 address in canonical form'),
        ("https://:443/", "has no host"),
    ],
)
def test_a_url_that_is_not_a_plain_web_address_is_refused(url: str, expected: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_url(url)
    assert expected in str(caught.value)
    assert str(caught.value).count(". ") == 0  # one sentence


def test_a_web_address_passes_unchanged() -> None:
    assert check_url("https://example.com/a?b=c#d") == "https://example.com/a?b=c#d"
    assert check_url("HTTP://example.com/") == "HTTP://example.com/"
    assert check_url("https://[::1]:8443/x") == "https://[::1]:8443/x"
    assert check_url("https://localhost:65535/") == "https://localhost:65535/"


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([{"kind": "eval", "code": "1"}], "actions.0"),
        ([{"kind": "click"}], "actions.0.click: give the element as selector (CSS) or ref"),
        ([{"kind": "click", "selector": "a", "ref": "e1"}], "give selector or ref, not both"),
        ([{"kind": "click", "ref": "7"}], "actions.0.click.ref"),
        ([{"kind": "select", "ref": "e2"}], "actions.0.select.value"),
        ([{"kind": "click", "selector": "a" * 301}], "at most 300 characters"),
        ([{"kind": "press", "key": "F12"}], "actions.0.press.key"),
        ([{"kind": "wait", "ms": 10_001}], "actions.0.wait.ms"),
        ([{"kind": "click", "selector": "a", "script": "x"}], "actions.0.click.script"),
    ],
)
def test_a_bad_action_is_named(actions: list[dict[str, Any]], expected: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_actions(actions)
    assert expected in str(caught.value)


def test_too_many_actions_are_refused() -> None:
    with pytest.raises(LimitExceeded):
        check_actions([{"kind": "wait", "ms": 1}] * (MAX_ACTIONS + 1))


def test_good_actions_become_what_the_driver_reads() -> None:
    assert check_actions(
        [
            {"kind": "click", "selector": "#go"},
            {"kind": "type", "text": "hi"},
            {"kind": "scroll", "dy": 300},
            {"kind": "wait_for", "selector": "p"},
        ]
    ) == (
        {"kind": "click", "selector": "#go"},
        {"kind": "type", "text": "hi"},
        {"kind": "scroll", "dy": 300, "dx": 0},
        {"kind": "wait_for", "selector": "p", "timeout_ms": 5000},
    )

"""What a browse may ask of its browser: the URL and the actions, checked before any box.

Belongs here: the action models (each kind, its fields and limits), reading a URL with the
proxy's own parser, and the one-sentence refusals. Does not belong here: starting or keeping
a box, or reading what it found (`browse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from airlock.egress.targets import TargetRejected, parse_authority
from airlock.errors import InvalidRequest, LimitExceeded

MAX_URL_CHARS = 2048
MAX_ACTIONS = 20
MAX_SELECTOR_CHARS = 300
MAX_TYPED_CHARS = 2000
MAX_WAIT_MS = 10_000
KEYS = (
    *("Enter", "Tab", "Escape", "Backspace", "ArrowUp", "ArrowDown", "ArrowLeft"),
    *("ArrowRight", "PageDown", "PageUp", "Home", "End"),
)
KINDS = (
    "click(selector|ref), type(text, selector?|ref?), press(key, selector?|ref?), "
    "select(value, selector|ref), hover(selector|ref), scroll_into_view(selector|ref), "
    "wait_for(selector, timeout_ms?), wait(ms), scroll(dy, dx?), back, forward, reload"
)

BROWSE_ACTIONS_DOC = (
    'Up to 20 steps, objects such as {"kind": "type", "selector": "#q", "text": "..."}: '
    f"{KINDS}; a ref ([ref=eN] of a snapshot) acts only in the browser that showed it (a "
    "fresh one has none). No scripts."
)

Selector = Annotated[str, Field(min_length=1, max_length=MAX_SELECTOR_CHARS)]
Ref = Annotated[str, Field(pattern=r"^e[1-9][0-9]{0,8}$")]


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Targeted(_Action):
    """An action on one element: the one a CSS selector finds first, or a snapshot's ref."""

    selector: Selector | None = None
    ref: Ref | None = None

    @model_validator(mode="after")
    def _one_target(self) -> _Targeted:
        if self.selector is not None and self.ref is not None:
            raise ValueError("give selector or ref, not both")
        return self


class _Required(_Targeted):
    @model_validator(mode="after")
    def _a_target(self) -> _Required:
        if self.selector is None and self.ref is None:
            raise ValueError("give the element as selector (CSS) or ref (eN of the snapshot)")
        return self


class Click(_Required):
    """Click the element (scrolled into view; refused when another covers its centre)."""

    kind: Literal["click"]


class Hover(_Required):
    """Move the mouse over the element."""

    kind: Literal["hover"]


class ScrollIntoView(_Required):
    """Scroll the element into the middle of the view."""

    kind: Literal["scroll_into_view"]


class Select(_Required):
    """Choose the option of a <select> whose value (or else label) is `value`."""

    kind: Literal["select"]
    value: str = Field(max_length=MAX_TYPED_CHARS)


class TypeText(_Targeted):
    """Type text, into the element (focused first) or where focus is."""

    kind: Literal["type"]
    text: str = Field(max_length=MAX_TYPED_CHARS)


class Press(_Targeted):
    """Press one key, on the element (focused first) or where focus is."""

    kind: Literal["press"]
    key: Literal[KEYS]  # type: ignore[valid-type]


class WaitFor(_Action):
    """Wait until the selector finds an element (the actions stop if it never does)."""

    kind: Literal["wait_for"]
    selector: Selector
    timeout_ms: int = Field(default=5000, ge=0, le=MAX_WAIT_MS)


class Wait(_Action):
    """Wait a number of milliseconds."""

    kind: Literal["wait"]
    ms: int = Field(ge=0, le=MAX_WAIT_MS)


class Scroll(_Action):
    """Scroll by dy (and dx) pixels, as a mouse wheel would."""

    kind: Literal["scroll"]
    dy: int = Field(ge=-100_000, le=100_000)
    dx: int = Field(default=0, ge=-100_000, le=100_000)


class History(_Action):
    """Go back or forward in the page's history, or reload it."""

    kind: Literal["back", "forward", "reload"]


Action = Annotated[
    Click | Hover | ScrollIntoView | Select | TypeText | Press | WaitFor | Wait | Scroll | History,
    Field(discriminator="kind"),
]
_ACTIONS: TypeAdapter[list[Action]] = TypeAdapter(list[Action])


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host, no credentials, no control characters.

    The authority is read by the proxy's own parser (`egress.targets.parse_authority`), so a
    URL passes here only if the proxy could take its host and port as written.
    """
    if len(url) > MAX_URL_CHARS:
        raise InvalidRequest(f"url is over {MAX_URL_CHARS} characters; give a shorter URL")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise InvalidRequest("url contains spaces or control characters; percent-encode them")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidRequest(
            f"url cannot be read ({exc}); give a full URL such as https://example.com/"
        ) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidRequest(
            f"url must start with http:// or https:// (got scheme {scheme[:20] or 'none'!r}); "
            "browse opens web pages only"
        )
    authority = parts.netloc
    if not parts.hostname:
        raise InvalidRequest("url has no host; give a full URL such as https://example.com/")
    if "@" in authority:
        raise InvalidRequest(
            "url must not carry credentials (user:password@); use a capability instead"
        )
    try:
        parse_authority(authority_of(parts))
    except TargetRejected as exc:
        raise InvalidRequest(f"url's host or port is not valid: {exc.reason}") from None
    return url


def authority_of(parts: SplitResult) -> str:
    """The host:port of a split http(s) URL, with its scheme's port when it names none."""
    default_port = 443 if parts.scheme.lower() == "https" else 80
    has_port = ":" in parts.netloc.rsplit("]", 1)[-1]
    return parts.netloc if has_port else f"{parts.netloc}:{default_port}"


def check_actions(actions: Sequence[Any]) -> tuple[dict[str, str | int], ...]:
    """The actions as the driver takes them; a bad one is named in one sentence."""
    if len(actions) > MAX_ACTIONS:
        raise LimitExceeded(f"{len(actions)} actions given; at most {MAX_ACTIONS} per browse")
    try:
        parsed = _ACTIONS.validate_python(list(actions))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise InvalidRequest(
            f"actions.{where}: {error['msg'].removeprefix('Value error, ')}; each action is "
            f"one of {KINDS}, with selectors of at most {MAX_SELECTOR_CHARS} characters"
        ) from exc
    return tuple(a.model_dump(exclude_none=True) for a in parsed)

"""The state of a conversation's one upstream connection: none, busy, or idle under a key.

A conversation holds at most one upstream at a time. It is reused for the next request
only when idle under the same `PoolKey`, and at the conversation's end an idle one goes
back to the run's pool while any other is closed. One small state type instead of flags
set in a dozen places (h11's `_state.py` shape). Not here: dialling or pooling themselves
(the loop's, asked for by `ReleaseUpstream` and `CloseUpstream`).
"""

from __future__ import annotations

from typing import Literal

from .steps import Action, CloseUpstream, PoolKey, ReleaseUpstream

LinkState = Literal["none", "busy", "idle"]


class UpstreamLink:
    """The conversation's upstream: `state`, and the key it was (or is to be) dialled under."""

    def __init__(self) -> None:
        self.state: LinkState = "none"
        self.key: PoolKey | None = None

    def serves(self, key: PoolKey) -> bool:
        """Whether the upstream held now can carry a request under `key`."""
        return self.state == "idle" and self.key == key

    def aim(self, key: PoolKey) -> list[Action]:
        """A new upstream is wanted under `key`: the one held, if any, is closed."""
        actions = self.drop()
        self.key = key
        return actions

    def opened(self) -> None:
        self.state = "busy"

    def taken(self) -> None:
        """A request starts on the upstream held."""
        if self.state == "idle":
            self.state = "busy"

    def answered(self, *, reusable: bool) -> list[Action]:
        """The request on it was answered: idle when `reusable`, else closed."""
        if self.state == "none":
            return []
        if reusable:
            self.state = "idle"
            return []
        return self.drop()

    def lost(self) -> None:
        """The upstream closed its side: nothing is held any more."""
        self.state = "none"

    def drop(self) -> list[Action]:
        was_open = self.state != "none"
        self.state = "none"
        return [CloseUpstream()] if was_open else []

    def end(self, *, poolable: bool) -> list[Action]:
        """The conversation ends: an idle upstream goes to the pool when `poolable`."""
        if self.state == "none":
            return []
        keep = self.state == "idle" and self.key is not None and poolable
        self.state = "none"
        return [ReleaseUpstream(self.key)] if keep and self.key is not None else [CloseUpstream()]

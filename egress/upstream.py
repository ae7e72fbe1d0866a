"""One exchange's upstream side: the request framed out, the response parsed, scrubbed and
framed back to the sandbox. Sans-IO: bytes in, bytes and an ending out.

The layer under `egress.conversation` for one request the proxy forwards (an inner request
of a terminated tunnel, or a plaintext one): it owns the upstream's h11 connection and the
response's scrubbing and framing, and says how the response ended (`Answered`, and whether
the upstream may serve the next request, or `Broken`, and why). Not here: deciding, the
run's byte caps and counters, records, the pool, or what an ending means for the
connection (all the conversation's).
"""

from __future__ import annotations

from dataclasses import dataclass

import h11

from .heads import forwarded_headers, header, response_headers
from .legs import Leg
from .scrub import Scrubber
from .steps import Action, SendClient


@dataclass(frozen=True)
class Answered:
    """The response ended; `reusable` when the upstream connection may carry the next."""

    reusable: bool


@dataclass(frozen=True)
class Broken:
    """The response cannot be passed on in full, for `reason`."""

    reason: str


Ending = Answered | Broken


class Upstream:
    """The upstream HTTP/1.1 of one exchange, from its request head to its response's end.

    `client` is the sandbox's side of the connection, which frames what goes back to it.
    """

    def __init__(self, leg: Leg, client: h11.Connection, scrubber: Scrubber) -> None:
        assert leg.request is not None
        self._leg = leg
        self._client = client
        self._conn = h11.Connection(h11.CLIENT)
        self.scrubber = scrubber
        headers = forwarded_headers(leg.request, leg.scheme, leg.host, leg.port, leg.header)
        request = h11.Request(method=leg.request.method, target=leg.target, headers=headers)
        self.head = self._conn.send(request) or b""
        self._body_length: int | None = None
        """The response's Content-Length, when that frames its body."""
        self._body_seen = 0
        self._body_left: int | None = None
        """Set once h11 has parsed the head and handed on what it buffered: the rest of a
        Content-Length body, relayed by `_rest_of_body` without a copy through h11."""

    # ---- the request, out ----

    def body(self, data: bytes) -> bytes:
        return self._conn.send(h11.Data(data=data)) or b""

    def end(self) -> bytes:
        return self._conn.send(h11.EndOfMessage()) or b""

    # ---- the response, back ----

    def receive(self, data: bytes, *, read: bool = True) -> tuple[list[Action], Ending | None]:
        """Take bytes of the response; with `read`, pass on what they complete."""
        if self._body_left is not None:
            return self._rest_of_body(data)
        self._conn.receive_data(data)
        return self._pull() if read else ([], None)

    def closed(self) -> tuple[list[Action], Ending]:
        """The upstream closed its connection: what that ends (the conversation has
        already chosen not to retry the request on a fresh one)."""
        if self._body_left is not None:
            # Worded as h11 words it when the cut comes in the part it parsed.
            length = self._body_length or 0
            return [], Broken(
                "the upstream sent malformed HTTP (peer closed connection without sending "
                f"complete message body (received {length - self._body_left} bytes, "
                f"expected {length}))"
            )
        actions: list[Action] = []
        if self._leg.status != 0 and self._conn.their_state is h11.SEND_BODY:
            # A body delimited by the connection's close ends here (RFC 9112 6.3).
            self._conn.receive_data(b"")
            actions, ending = self._pull()
            if ending is not None:
                return actions, ending
        return actions, Broken("the upstream closed the connection before answering in full")

    def _pull(self) -> tuple[list[Action], Ending | None]:
        actions: list[Action] = []
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                return actions, Broken(f"the upstream sent malformed HTTP ({exc})")
            if event is h11.NEED_DATA:
                if self._body_length is not None and self._conn.their_state is h11.SEND_BODY:
                    # h11 holds nothing more; the rest of the body needs no parsing.
                    self._body_left = self._body_length - self._body_seen
                return actions, None
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                unreadable = self.scrubber.unreadable(event.headers)
                if unreadable is not None:
                    return actions, Broken(unreadable)
                actions.append(self._response_head(event))
            elif isinstance(event, h11.Data):
                self._body_seen += len(event.data)
                actions += self._pass(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                more, answered = self._finish()
                return [*actions, *more], answered
            else:
                return actions, Broken("the upstream closed the connection mid-answer")

    def _response_head(self, event: h11.Response) -> SendClient:
        self._leg.status = event.status_code
        if header(event, b"transfer-encoding") is None:
            length = header(event, b"content-length")
            self._body_length = None if length is None else int(length)
        headers = response_headers(
            event, close=self._leg.scheme == "http", scrub=self.scrubber.mask
        )
        response = h11.Response(status_code=event.status_code, headers=headers, reason=event.reason)
        return SendClient(self._client.send(response) or b"")

    def _pass(self, data: bytes) -> list[Action]:
        """Pass a piece of the response body to the sandbox, scrubbed."""
        passed = self.scrubber.feed(data)
        if not passed:
            return []
        return [SendClient(self._client.send(h11.Data(data=passed)) or b"")]

    def _rest_of_body(self, data: bytes) -> tuple[list[Action], Ending | None]:
        """The rest of a Content-Length body, once its head is parsed: no h11 parsing."""
        assert self._body_left is not None
        body = data[: self._body_left]
        self._body_left -= len(body)
        actions = self._pass(body)
        if self._body_left != 0:
            return actions, None
        # Bytes past the body are the upstream's mistake: it is not reused.
        more, answered = self._finish(clean=len(body) == len(data))
        return [*actions, *more], answered

    def _finish(self, *, clean: bool = True) -> tuple[list[Action], Answered]:
        actions: list[Action] = []
        rest = self.scrubber.flush()
        if rest:
            actions.append(SendClient(self._client.send(h11.Data(data=rest)) or b""))
        actions.append(SendClient(self._client.send(h11.EndOfMessage()) or b""))
        if self._body_left is None:
            clean = self._conn.their_state is h11.DONE and not self._conn.trailing_data[0]
        return actions, Answered(reusable=clean and self._conn.our_state is h11.DONE)

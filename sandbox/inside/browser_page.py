"""What one browse saw, as the DevTools events of its page arrive: the browser box's state.

Belongs here: `Page` and its event handlers: adopting the targets of the browse's own browser
context (and only those), failing every request whose scheme is not http(s), answering the
proxy's 407 with the run's token, dismissing JavaScript dialogs, following the main frame's
document (its URL, the proxy's refusal of it, Chromium's error for it, the one it shows),
noting console lines, crashes and downloads, and telling the gate which hosts the page
asked for. Does not belong here: the pipe (`devtools`), starting Chromium or reporting
(`browser`), acting on the page (`browser_actions`).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .devtools import Cdp

MAX_CONSOLE = 200
# The page's network is quiet once no request of it is in flight for this long. Short: it
# catches what the load itself starts (a script's fetch on load), not what a page starts
# later on a timer, which a `wait_for` action waits for; Chromium's networkIdle (500 ms of
# quiet, reported up to seconds late) or a 500 ms window cost every read 0.4 s or more.
QUIET_S = 0.1
MAX_CONSOLE_CHARS = 1000
MAX_BLOCKED_CHARS = 200
ALLOWED_SCHEMES = ("http:", "https:")
# The proxy's own refusals, and only those, carry this header: it drops an upstream's.
PROXY_REASON = "x-airlock-reason"


class Page:
    """One browse: the page session, what it said, and what it asked for."""

    def __init__(
        self, cdp: Cdp, request: dict[str, Any], token: str, admit: Callable[[str], None]
    ) -> None:
        self.cdp = cdp
        self.request = request
        self.token = token
        self.admit = admit
        """Tells the gate (`browser_gate`) that the page asked for this URL's host."""
        self.context = ""
        """The browse's own browser context: the only one whose network is the run's proxy."""
        self.session = ""
        self.target = ""
        self.lifecycle_seen: set[tuple[str, str]] = set()
        self.crashed = False
        self.pages = 0
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self.blocked: list[str] = []
        self.downloads: dict[str, dict[str, Any]] = {}
        self.auth_tries: dict[str, int] = {}
        self.document = ""
        """The request id of the main frame's latest document."""
        self.document_url = ""
        self.document_loader = ""
        """The loader of the main frame's latest document request (its lifecycle's key)."""
        self.loader = ""
        """The loader of the document the main frame shows now (refs are bound to it)."""
        self.world: tuple[str, int] | None = None
        """(loader, context id) of our own isolated world in that document."""
        self.refused: tuple[int, str] | None = None
        """(status, reason) when the proxy itself answered the main frame's document."""
        self.failed = ""
        """Chromium's error for the main frame's document, when no answer came."""
        self.in_flight: set[str] = set()
        """Requests of the page sent and not yet finished or failed."""
        self.active_at = 0.0
        """When the page last started or ended a request (time.monotonic)."""
        self.navigations = 0
        """Navigations of the main frame in its own tab the page asked for (a link, a form,
        a script), counted as Chromium announces them: before their document request."""
        self.navigations_ended = 0
        """Main-frame navigations that ended without a new document: within the document (an
        anchor, history.pushState) or stopped (cancelled, a download)."""

    def next_step(self, request: dict[str, Any], token: str) -> None:
        """A new job on this page (a kept browser's next step): its request and run token;
        what the page said and did is counted afresh for each step's report."""
        self.request = request
        self.token = token
        self.console, self.dialogs, self.blocked = [], [], []
        self.downloads = {}
        self.auth_tries = {}
        # A request the last step's proxy left hanging never reports its end.
        self.in_flight = set()

    def on_event(self, message: dict[str, Any]) -> None:
        method = message.get("method", "")
        params = message.get("params", {})
        session = message.get("sessionId", "")
        handler = _HANDLERS.get(method)
        if handler is not None:
            handler(self, params, session)

    def attached(self, params: dict[str, Any], _session: str) -> None:
        """A new target (our page, a popup, a frame): intercept it before it runs."""
        session = params["sessionId"]
        info = params.get("targetInfo", {})
        if info.get("browserContextId", self.context) != self.context:
            # Chromium's own tab of its default context, whose network leads nowhere.
            self.cdp.send("Runtime.runIfWaitingForDebugger", {}, session)
            return
        kind = info.get("type")
        if kind == "page":
            self.pages += 1
            if self.pages > int(self.request["max_pages"]):
                self.cdp.send("Target.closeTarget", {"targetId": info["targetId"]})
                self.console.append(f"[airlock] a page beyond the limit of {self.pages - 1} closed")
                return
            if not self.session:
                self.session = session
                self.target = info["targetId"]
        patterns = [{"urlPattern": "*", "requestStage": "Request"}]
        self.cdp.send("Fetch.enable", {"patterns": patterns, "handleAuthRequests": True}, session)
        if kind == "page":
            for domain in ("Page", "Inspector", "Runtime", "Network"):
                self.cdp.send(f"{domain}.enable", {}, session)
            self.cdp.send("Page.setLifecycleEventsEnabled", {"enabled": True}, session)
        self.cdp.send("Runtime.runIfWaitingForDebugger", {}, session)

    def paused(self, params: dict[str, Any], session: str) -> None:
        url = str(params.get("request", {}).get("url", ""))
        if url.lower().startswith(ALLOWED_SCHEMES):
            # Admitted before it is let go, so the gate knows it when its connection comes.
            self.admit(url)
            self.cdp.send("Fetch.continueRequest", {"requestId": params["requestId"]}, session)
            return
        self.blocked.append(url[:MAX_BLOCKED_CHARS])
        reason = {"requestId": params["requestId"], "errorReason": "BlockedByClient"}
        self.cdp.send("Fetch.failRequest", reason, session)

    def auth(self, params: dict[str, Any], session: str) -> None:
        """The proxy's 407 gets the run's token, once per request; any other challenge (a
        site's own) is cancelled, since the agent has no way to answer it."""
        request_id = params["requestId"]
        tries = self.auth_tries.get(request_id, 0)
        self.auth_tries[request_id] = tries + 1
        if params.get("authChallenge", {}).get("source") == "Proxy" and tries == 0:
            answer = {"response": "ProvideCredentials", "username": "airlock"}
            answer["password"] = self.token
        else:
            answer = {"response": "CancelAuth"}
        self.cdp.send(
            "Fetch.continueWithAuth",
            {"requestId": request_id, "authChallengeResponse": answer},
            session,
        )

    def dialog(self, params: dict[str, Any], session: str) -> None:
        """An alert, confirm, prompt or beforeunload would hold the page (and every call
        into it) until answered: dismiss it at once and note it. A beforeunload is accepted,
        so the navigation an action asked for goes on."""
        kind = str(params.get("type", "alert"))
        if len(self.dialogs) < MAX_CONSOLE:
            message = str(params.get("message", ""))[:MAX_CONSOLE_CHARS]
            self.dialogs.append(f"[{kind}] {message}")
        self.cdp.send("Page.handleJavaScriptDialog", {"accept": kind == "beforeunload"}, session)

    def request_sent(self, params: dict[str, Any], session: str) -> None:
        if session == self.session:
            self.in_flight.add(str(params.get("requestId", "")))
            self.active_at = time.monotonic()
        if session != self.session or not self._is_document(params):
            return
        self.document = str(params.get("requestId", ""))
        self.document_url = str(params.get("request", {}).get("url", ""))
        self.document_loader = str(params.get("loaderId", ""))
        self.refused, self.failed = None, ""

    def navigated(self, params: dict[str, Any], session: str) -> None:
        frame = params.get("frame", {})
        if session == self.session and not frame.get("parentId"):
            self.loader = str(frame.get("loaderId", ""))

    def navigation_requested(self, params: dict[str, Any], session: str) -> None:
        main = session == self.session and params.get("frameId") == self.target
        if main and params.get("disposition", "currentTab") == "currentTab":
            self.navigations += 1

    def navigation_ended(self, params: dict[str, Any], session: str) -> None:
        if session == self.session and params.get("frameId") == self.target:
            self.navigations_ended += 1

    def websocket(self, params: dict[str, Any], _session: str) -> None:
        # Fetch never pauses a websocket; its handshake is the page's all the same.
        self.admit(str(params.get("url", "")))

    def response(self, params: dict[str, Any], session: str) -> None:
        if session != self.session or params.get("requestId") != self.document:
            return
        answer = params.get("response", {})
        headers = {str(k).lower(): str(v) for k, v in answer.get("headers", {}).items()}
        status = int(answer.get("status", 0))
        if PROXY_REASON in headers and status >= 400:
            self.refused = (status, headers[PROXY_REASON])

    def loading_finished(self, params: dict[str, Any], session: str) -> None:
        if session == self.session:
            self.in_flight.discard(str(params.get("requestId", "")))
            self.active_at = time.monotonic()

    def quiet(self) -> bool:
        """No request of the page in flight for QUIET_S."""
        return not self.in_flight and time.monotonic() - self.active_at >= QUIET_S

    def settle(self, until: float) -> None:
        """Let the page's fetches finish: until its network is quiet (or Chromium says it
        is idle, or the page crashed), at most until `until`."""
        while time.monotonic() < until and not self.crashed and not self.quiet():
            if (self.document_loader, "networkIdle") in self.lifecycle_seen:
                return
            wake = self.active_at + QUIET_S if not self.in_flight else until
            self.cdp.pump(lambda: False, until=min(until, max(wake, time.monotonic() + 0.02)))

    def loading_failed(self, params: dict[str, Any], session: str) -> None:
        if session == self.session:
            self.loading_finished(params, session)
        if session != self.session or params.get("requestId") != self.document:
            return
        if not params.get("canceled"):
            self.failed = str(params.get("errorText", "")) or "net::ERR_FAILED"

    def _is_document(self, params: dict[str, Any]) -> bool:
        return params.get("type") == "Document" and params.get("frameId") == self.target

    def console_called(self, params: dict[str, Any], _session: str) -> None:
        parts = [
            str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])
        ]
        self._note_console(f"[{params.get('type', 'log')}] " + " ".join(parts))

    def exception(self, params: dict[str, Any], _session: str) -> None:
        details = params.get("exceptionDetails", {})
        text = details.get("exception", {}).get("description") or details.get("text", "")
        self._note_console(f"[exception] {text}")

    def _note_console(self, text: str) -> None:
        if len(self.console) < MAX_CONSOLE:
            self.console.append(text[:MAX_CONSOLE_CHARS])

    def lifecycle(self, params: dict[str, Any], session: str) -> None:
        # Kept by loader: the blank page the tab started with has its own load and idle.
        if session == self.session:
            self.lifecycle_seen.add((params.get("loaderId", ""), params.get("name", "")))

    def crash(self, _params: dict[str, Any], session: str) -> None:
        if session == self.session:
            self.crashed = True

    def target_crash(self, params: dict[str, Any], _session: str) -> None:
        if params.get("targetId") == self.target:
            self.crashed = True

    def download_begins(self, params: dict[str, Any], _session: str) -> None:
        self.downloads[params["guid"]] = {"name": params.get("suggestedFilename", ""), "state": ""}

    def download_progress(self, params: dict[str, Any], _session: str) -> None:
        if params.get("guid") in self.downloads:
            self.downloads[params["guid"]]["state"] = params.get("state", "")


_HANDLERS = {
    "Target.attachedToTarget": Page.attached,
    "Fetch.requestPaused": Page.paused,
    "Fetch.authRequired": Page.auth,
    "Page.javascriptDialogOpening": Page.dialog,
    "Network.requestWillBeSent": Page.request_sent,
    "Page.frameNavigated": Page.navigated,
    "Page.frameRequestedNavigation": Page.navigation_requested,
    "Page.navigatedWithinDocument": Page.navigation_ended,
    "Page.frameStoppedLoading": Page.navigation_ended,
    "Network.webSocketCreated": Page.websocket,
    "Network.responseReceived": Page.response,
    "Network.loadingFailed": Page.loading_failed,
    "Network.loadingFinished": Page.loading_finished,
    "Runtime.consoleAPICalled": Page.console_called,
    "Runtime.exceptionThrown": Page.exception,
    "Page.lifecycleEvent": Page.lifecycle,
    "Inspector.targetCrashed": Page.crash,
    "Target.targetCrashed": Page.target_crash,
    "Browser.downloadWillBegin": Page.download_begins,
    "Browser.downloadProgress": Page.download_progress,
}

"""The driver of the browser box: the entrypoint of every browser container.

It speaks the runner's protocol (wire.py): it starts before any job is known (with
`--egress SOCKET PORT` it forks the relay to the proxy socket at once) and starts Chromium
then, trusting the CA the host left beside the socket (`ca.pem`: the box's own, made with
its container, so a pooled box is ready to browse the moment it is taken). It reads one job
whose `browse` key is the validated request (url, actions, viewport, limits), drives headless
Chromium through the DevTools protocol over a pipe (`--remote-debugging-pipe`: fds 3 and 4,
NUL-separated JSON; no port, no websocket), and reports like a run: the page's findings
(`page.json`), its screenshot (`screenshot.png`) and any downloads (`downloads/`) are files
of the container's own empty /workspace, sent with the listing and tar of a run's report
(report.py), then RESULT. The host treats all of it as hostile, as it does a run's.

Privilege separation is the runner's: the driver runs as root with only SETUID, SETGID,
SETPCAP and KILL, undumpable; Chromium runs as the sandbox user with no capabilities, so a
compromised renderer can neither trace the driver nor write its report channel. Chromium's
own sandbox is off (`--no-sandbox`: it needs user namespaces or a setuid helper, neither of
which a hardened container has); gVisor is the sandbox, as for run_code.

The network is the proxy's, for the page alone: the page lives in a browser context of its
own whose proxy is the gate (`browser_gate`) in front of the in-container relay, with
`<-loopback>` removing Chromium's implicit loopback bypass, so every request of the page,
websocket included, goes to the run's proxy, which decides and records it. Chromium's
default context, and with it every background service it runs (sign-in, GCM, variations),
has a proxy on a port nothing listens on: those calls end in the box and never reach the
proxy or its records; the gate stops what Chromium opens of its own in the page's context
(a preconnect to its search engine). The run's token answers the proxy's 407
(Fetch.authRequired). Every request of the page is paused before it leaves (Fetch): one
whose scheme is not http(s) is failed there. A JavaScript dialog is dismissed as it opens,
and a main frame that did not load (Chromium's error, or the proxy's own refusal instead of
the page) is reported as such, not read. The box's CA is trusted through an NSS database
made in the sandbox user's fresh HOME (Chromium's own store on Linux), so TLS is verified as
usual, against that CA and the system roots; a job whose CA is another is refused. The
page's events and state are `browser_page`'s, the DevTools pipe `devtools`'.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:
    # Started as the image's entrypoint script, which -I leaves off the path (PEP 366).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "inside"

from .browser_actions import Actor, evaluate
from .browser_gate import Gate
from .browser_page import ALLOWED_SCHEMES, Page
from .browser_snapshot import Refs, snapshot, world_of
from .devtools import Cdp, Deadline, PageGone

# The runner's own machinery, shared rather than copied: the entrypoint's frame (the relay,
# the job, the fault, the linger), dropping privileges, stopping everything, and the report.
from .entry import read_job, serve
from .privileges import as_sandbox_user, become_sandbox_user
from .report import send_result
from .runner import oom_kills, stop_everything
from .wire import LENGTH, SANDBOX_HOME, STDERR, WORKSPACE, encode_frame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO

CHROMIUM = "/usr/lib/chromium/chromium"
CERTUTIL = "/usr/bin/certutil"
PROFILE_DIR = "/tmp/profile"
DOWNLOADS = "downloads"
CHROMIUM_LOG = "/tmp/chromium.log"
# Beside the proxy's socket in the read-only egress mount: the CA made for this box.
BOX_CA = "ca.pem"
# How long Chromium may take to answer once started, before any job is known.
BOOT_S = 60.0
# The window Chromium starts with, before a job says its viewport (each page's is set by
# device metrics, so the screenshot is the job's size whatever this is).
WINDOW = (1280, 800)
# How long the page may keep fetching after its load event before it is read anyway.
SETTLE_S = 2.0
# DevTools' words for a read whose document went away under it.
CONTEXT_LOST = ("Cannot find context", "context was destroyed")
LOG_TAIL = 4096
MAX_LINKS = 200
MAX_TEXT_CHARS = 200_000
# Chromium's own proxy, for its default context and with it every background service
# (sign-in, GCM, variations): a port nothing in the box listens on, so those calls end at
# once, in the box. Pages live in a browser context of their own whose proxy is the relay.
NOWHERE_PORT = 9
# Flags that close every way out but the proxy, and every background service.
CLOSED_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-field-trial-config",
    "--disable-search-engine-choice-screen",
    "--no-service-autorun",
    "--no-pings",
    "--allow-browser-signin=false",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"
    "NetworkPrediction,InterestFeedContentSuggestions,AutofillServerCommunication,"
    "CertificateTransparencyComponentUpdater,DnsOverHttps,PrivacySandboxSettings4,"
    "NetworkTimeServiceQuerying,LensOverlay,SafeBrowsing,PreconnectToSearch,"
    "SearchPrefetchServicePrefetching,OmniboxSearchPrefetch,SearchEnginePreconnector,"
    "SearchEnginePreconnect2,DsePreload2,Prewarm,PrewarmServiceWorkerRegistrationForDSE",
    "--dns-prefetch-disable",
    # Whatever still calls out from the default context meets NOWHERE_PORT, loopback too.
    f"--proxy-server=http://127.0.0.1:{NOWHERE_PORT}",
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    # Nothing is resolved in the box; the proxy is named by its address.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def _trust_ca(ca_pem: str) -> None:
    """An NSS database in the fresh HOME that trusts the run's CA for TLS servers."""
    nssdb = os.path.join(SANDBOX_HOME, ".pki", "nssdb")
    ca_file = os.path.join(SANDBOX_HOME, "run-ca.pem")
    with as_sandbox_user():
        os.makedirs(nssdb, mode=0o700)
        with open(ca_file, "w", encoding="ascii") as f:
            f.write(ca_pem)
    for argv in (
        [CERTUTIL, "-d", f"sql:{nssdb}", "-N", "--empty-password"],
        [CERTUTIL, "-d", f"sql:{nssdb}", "-A", "-n", "airlock-run", "-t", "C,,", "-i", ca_file],
    ):
        # The driver has no threads, so dropping privileges in the child is safe.
        subprocess.run(
            argv,
            check=True,
            capture_output=True,
            env=_chromium_env(),
            timeout=30,
            preexec_fn=become_sandbox_user,
        )


def _chromium_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_HOME, "LANG": "C.UTF-8"}


def _start_chromium() -> tuple[int, int, int]:
    """Fork Chromium as the sandbox user with the pipe on its fds 3 and 4; (pid, to, from)."""
    to_read, to_write = os.pipe()
    from_read, from_write = os.pipe()
    width, height = WINDOW
    argv = [
        CHROMIUM,
        *CLOSED_FLAGS,
        f"--user-data-dir={PROFILE_DIR}",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            become_sandbox_user()
            log = os.open(CHROMIUM_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            devnull = os.open(os.devnull, os.O_RDONLY)
            for source, target in ((devnull, 0), (log, 1), (log, 2), (to_read, 3), (from_write, 4)):
                os.dup2(source, target)
                # dup2 onto itself keeps the pipe's close-on-exec flag.
                os.set_inheritable(target, True)
            os.closerange(5, 1 << 16)
            os.execve(CHROMIUM, argv, _chromium_env())
        finally:
            os._exit(127)
    os.close(to_read)
    os.close(from_write)
    return pid, to_write, from_read


def _read_page(request: dict[str, Any]) -> str:
    """The script that reads the page, each field cut to what the host takes."""
    return f"""(() => ({{
  title: document.title.slice(0, {int(request["max_title_chars"])}),
  url: location.href.slice(0, {int(request["max_url_chars"])}),
  text: (document.body ? document.body.innerText : '').slice(0, {MAX_TEXT_CHARS}),
  links: Array.from(document.links).slice(0, {MAX_LINKS}).map(a => ({{
    text: (a.innerText || '').trim().slice(0, 200), href: a.href.slice(0, 2000)}}))
}}))()"""


def _open_page(page: Page, gate_port: int) -> None:
    """The browse's own browser context, its proxy the gate to the relay, and its page
    (about:blank), opened when the box starts: a job finds its page waiting.

    Chromium's default context (its first tab, its background services) keeps the
    command line's proxy, which leads nowhere (NOWHERE_PORT): only what the page does
    reaches the run's proxy, so the run's records list only the page's requests.
    """
    cdp = page.cdp
    cdp.call(
        "Target.setAutoAttach",
        {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
    )
    page.context = cdp.call(
        "Target.createBrowserContext",
        {
            "proxyServer": f"http://127.0.0.1:{gate_port}",
            # Without it Chromium would take loopback (the relay's own port among it)
            # directly instead of through the proxy.
            "proxyBypassList": "<-loopback>",
            "disposeOnDetach": True,
        },
    )["browserContextId"]
    cdp.call(
        "Browser.setDownloadBehavior",
        {
            "behavior": "allowAndName",
            "browserContextId": page.context,
            "downloadPath": os.path.join(WORKSPACE, DOWNLOADS),
            "eventsEnabled": True,
        },
    )
    cdp.call("Target.createTarget", {"url": "about:blank", "browserContextId": page.context})
    cdp.pump(lambda: bool(page.session))


def _size_page(page: Page) -> None:
    """The viewport the first job asks for (the screenshot's size)."""
    request = page.request
    metrics = {"width": int(request["width"]), "height": int(request["height"])}
    page.cdp.call(
        "Emulation.setDeviceMetricsOverride",
        {**metrics, "deviceScaleFactor": 1, "mobile": False},
        page.session,
    )


def _not_loaded(page: Page, found: dict[str, Any], error: str = "") -> bool:
    """Whether the main frame's document failed (Chromium's error, or the proxy's own
    answer instead of the page's); if so `found` says why and nothing of it is read."""
    if page.refused is not None:
        status, reason = page.refused
        error = f"the page did not load: the proxy answered {status}: {reason}"
    elif error or page.failed:
        error = f"the page did not load ({error or page.failed})"
    else:
        return False
    found.update(error=error, load_failed=True, url=page.document_url or page.request["url"])
    return True


def _browse(page: Page, actor: Actor) -> dict[str, Any]:
    """Open the request's URL (a kept browser's later step may name none: it stays on its
    page), act, read it; what `page.json` says."""
    cdp, request = page.cdp, page.request
    found: dict[str, Any] = {"error": None, "actions_done": 0}
    if request["url"]:
        navigated = cdp.call("Page.navigate", {"url": request["url"]}, page.session)
        if _not_loaded(page, found, str(navigated.get("errorText") or "")):
            return found
        loader = str(navigated.get("loaderId", ""))
        seen = page.lifecycle_seen
        cdp.pump(lambda: (loader, "load") in seen or page.crashed)
        # What the page fetches on load is let finish (until no request is in flight for
        # QUIET_S), up to SETTLE_S.
        page.settle(time.monotonic() + SETTLE_S)
        if _not_loaded(page, found):
            return found
    for action in request["actions"]:
        if page.crashed:
            break
        try:
            actor.act(action)
        except (LookupError, ValueError, RuntimeError) as exc:
            found["error"] = f"action {found['actions_done'] + 1} ({action['kind']}) failed: {exc}"
            break
        found["actions_done"] += 1
    if page.crashed:
        raise PageGone("the page's renderer died")
    try:
        return _read(page, actor.refs, found)
    except RuntimeError as exc:
        if not any(lost in str(exc) for lost in CONTEXT_LOST):
            raise
    # A new document replaced the one being read (a navigation that started later still,
    # or one the page made by itself): the page is fine, read the new one, once.
    actor.settle()
    return _read(page, actor.refs, found)


def _read(page: Page, refs: Refs, found: dict[str, Any]) -> dict[str, Any]:
    """Read the page as it now is, its snapshot and its screenshot (unless the request says
    none), unless an action left it unloaded."""
    cdp = page.cdp
    if (page.failed or page.refused is not None) and _not_loaded(page, found):
        # An action's navigation failed: its error page (and the document it replaced,
        # going away meanwhile) is not read.
        return found
    # Read in a world of our own: the page's scripts share its DOM but not its JavaScript,
    # so a page that replaced Array.from or String.prototype.slice changes nothing here.
    world = world_of(page)
    where = str(evaluate(page, "location.href", world) or "")
    if not where.lower().startswith(ALLOWED_SCHEMES):
        if _not_loaded(page, found):
            return found
        # Chromium keeps web pages off file:, chrome: and the like itself; should one get
        # there anyway, nothing of it is read or shown.
        found["error"] = f"the page left the web (for {where[:100]!r}); nothing of it was read"
        return found
    if page.refused is not None and _not_loaded(page, found):
        return found
    read = evaluate(page, _read_page(page.request), world)
    if isinstance(read, dict):
        found.update(read)
    found.update(snapshot(page, refs, int(page.request["max_snapshot_lines"])))
    if page.request["screenshot"]:
        # optimizeForSpeed: a faster PNG encoding (larger, same pixels), a third of the time.
        shot = cdp.call(
            "Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}, page.session
        )
        with as_sandbox_user(), open(os.path.join(WORKSPACE, "screenshot.png"), "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    # A download still running is not waited for beyond the settle time.
    cdp.pump(
        lambda: all(d["state"] in ("completed", "canceled") for d in page.downloads.values()),
        until=time.monotonic() + SETTLE_S,
    )
    return found


def _name_downloads(page: Page) -> list[dict[str, Any]]:
    """Downloads are saved under their guid; keep finished ones under a plain name."""
    kept = []
    directory = os.path.join(WORKSPACE, DOWNLOADS)
    with as_sandbox_user():
        for number, (guid, download) in enumerate(page.downloads.items(), 1):
            source = os.path.join(directory, guid)
            if download["state"] != "completed" or not os.path.isfile(source):
                with contextlib.suppress(OSError):
                    os.unlink(source)
                continue
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in download["name"])
            name = f"{number}-{safe.lstrip('.')[:100] or 'download'}"
            os.rename(source, os.path.join(directory, name))
            kept.append({"name": download["name"][:200], "path": f"{DOWNLOADS}/{name}"})
    return kept


class _Browser:
    """What lives across the steps of one box: Chromium, its pipe, the page and its refs.

    Made when the box starts, before any job: the CA trusted, Chromium started and its
    page open on about:blank in the page's own context; the first job sizes it."""

    def __init__(self, relay_port: int, ca_pem: str) -> None:
        _trust_ca(ca_pem)
        self.ca_pem = ca_pem
        with as_sandbox_user():
            os.makedirs(os.path.join(WORKSPACE, DOWNLOADS))
        gate = Gate(relay_port)
        gate.start()
        self.pid, to_chrome, from_chrome = _start_chromium()
        self.cdp = Cdp(to_chrome, from_chrome, time.monotonic() + BOOT_S)
        # The first job's request replaces this; until then one page is all there is.
        self.page = Page(self.cdp, {"max_pages": 1}, "", gate.admit)
        self.cdp.on_event = self.page.on_event
        _open_page(self.page, gate.port)
        self.actor = Actor(self.page, Refs())
        self.sized = False

    def begin(self, job: dict[str, Any]) -> tuple[Page, Actor]:
        """The page of this job (the first makes it), after checking the job's CA is the
        box's: any other would fail every TLS handshake of the page, or mean a mix-up."""
        egress = job.get("egress")
        if not egress or egress.get("ca_pem") != self.ca_pem:
            raise RuntimeError("the job's CA is not the one this box trusts; take a new box")
        self.page.next_step(job["browse"], job["env"]["AIRLOCK_TOKEN"])
        return self.page, self.actor


def _box_ca(socket_path: str) -> str:
    """The CA the host made for this box, left beside the proxy's socket."""
    with open(os.path.join(os.path.dirname(socket_path), BOX_CA), encoding="ascii") as f:
        return f.read()


def _step(browser: _Browser, job: dict[str, Any], out: BinaryIO) -> dict[str, Any]:
    """One job on the box's browser: open (the first), navigate, act, read, report.

    A job with `keep` leaves Chromium running for the next job on the same stream (a kept
    browser); the last, or one whose page died or ran out of time, stops everything."""
    request = job["browse"]
    started = time.monotonic()
    oom_before = oom_kills()
    page, actor = browser.begin(job)
    browser.cdp.deadline = started + float(job["timeout_s"])
    timed_out, exit_code, kept = False, 0, bool(request.get("keep"))
    try:
        if browser.cdp.closed:
            raise PageGone("Chromium exited between steps")
        if not browser.sized:
            _size_page(page)
            browser.sized = True
        found = _browse(page, actor)
        if found["error"]:
            exit_code = 1
    except Deadline:
        timed_out, exit_code, kept = True, 1, False
        found = {"error": "the page did not finish in time"}
    except PageGone as exc:
        exit_code, kept, found = 1, False, {"error": str(exc)}
    except RuntimeError as exc:
        # DevTools refused a call the page's state made impossible: this step's page is
        # lost, and the browser with it.
        exit_code, kept, found = 1, False, {"error": f"the browser failed: {exc}"[:500]}
    found.update(console=page.console, dialogs=page.dialogs, blocked=page.blocked)
    found.update(pages=page.pages, kept=kept)
    _cut(found, request)
    duration_ms = int((time.monotonic() - started) * 1000)
    if kept:
        # Chromium stays for the next step; what the box sends is only the driver's files.
        stopped = True
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(browser.pid, signal.SIGKILL)
        stopped = stop_everything()
    found["downloads"] = _name_downloads(page)
    with as_sandbox_user(), open(os.path.join(WORKSPACE, "page.json"), "w", encoding="utf-8") as f:
        json.dump(found, f)
    tail = _log_tail()
    out.write(encode_frame(STDERR, tail))
    empty = {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    return {
        "exit_code": exit_code,
        "signal": None,
        "timed_out": timed_out,
        "oom_kills": oom_kills() - oom_before,
        "duration_ms": duration_ms,
        "stdout": empty,
        "stderr": {"bytes": len(tail), "sha256": hashlib.sha256(tail).hexdigest()},
        "stopped": stopped,
        "kept": kept,
    }


def _clear_outputs() -> None:
    """The last step's files go before the next: each step sends only its own."""
    with as_sandbox_user():
        for name in ("page.json", "screenshot.png"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(WORKSPACE, name))
        directory = os.path.join(WORKSPACE, DOWNLOADS)
        for name in os.listdir(directory):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _next_job(stdin: BinaryIO, cdp: Cdp | None) -> dict[str, Any] | None:
    """The next job, or None when the host hung up. Meanwhile Chromium's events are handled
    (a paused request let go: with no step's proxy bound, it fails in the box)."""
    while True:
        watched: list[Any] = [stdin] if cdp is None or cdp.closed else [stdin, cdp.source]
        if stdin in select.select(watched, [], [])[0]:
            break
        if cdp is not None:
            cdp.drain()
    head = stdin.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    job, _ = read_job(stdin, head)
    return job


def _cut(found: dict[str, Any], request: dict[str, Any]) -> None:
    """Each field of the report at most as long as the host takes it: a page with a very
    long title or URL (or an error quoting one) loses their tail, never the report."""
    for key, limit in (("title", "max_title_chars"), ("url", "max_url_chars")):
        if isinstance(found.get(key), str):
            found[key] = found[key][: int(request[limit])]
    if found.get("error"):
        found["error"] = str(found["error"])[: int(request["max_error_chars"])]


def _log_tail() -> bytes:
    """The end of Chromium's own log, for the operator's run record (never the agent)."""
    with contextlib.suppress(OSError), as_sandbox_user(), open(CHROMIUM_LOG, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - LOG_TAIL))
        return f.read()
    return b""


def main(argv: list[str]) -> None:
    """`python3 -I -S browser.py --egress SOCKET PORT`."""
    serve(argv, lambda stdin, out, relay: _drive(stdin, out, relay, argv))


def _drive(stdin: BinaryIO, out: BinaryIO, relay: int | None, argv: list[str]) -> None:
    """Chromium started at once, before any job (a pooled box waits with its page open),
    then the first job and its steps until one is not kept."""
    if relay is None:
        raise RuntimeError("a browse needs its proxy: start the box with --egress")
    browser: _Browser | None = None
    try:
        browser = _Browser(int(argv[2]), _box_ca(argv[1]))
    except Exception as exc:
        # Nobody reads the box before its job: a failed start answers the job.
        failure: Exception | None = exc
    else:
        failure = None
    job = _next_job(stdin, browser.cdp if browser is not None else None)
    if failure is not None:
        raise failure
    assert browser is not None
    while job is not None:
        report = _step(browser, job, out)
        kept = report["kept"]
        send_result(report, job["artifact_caps"], {}, out)
        if not kept:
            break
        # A kept browser: the next step comes on the same stream, until the host
        # hangs up or removes the box.
        job = _next_job(stdin, browser.cdp)
        if job is not None:
            _clear_outputs()


if __name__ == "__main__":
    main(sys.argv[1:])

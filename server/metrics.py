"""Prometheus metrics of one server, with the official client library.

Counters and the run-duration histogram are fed by `tools.events` (the one place that
reads a finished run and its egress records); gauges (live sessions, runs in progress,
live grants, the warm pool) are read from the live server at scrape time. Each server
has its own registry, so two servers in one process never share numbers. Labels are
tenants, statuses and decisions: never an id, a host or anything an agent chose freely.
A tenant's view holds its own series only; the operator's holds every series.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse
from wsgiref.types import WSGIApplication as WSGIApp

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from airlock.errors import InvalidRequest
from airlock.tools.events import CapabilityDecided, Event, RunFinished

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


@dataclass(frozen=True)
class LiveState:
    """What the server holds right now, read at each scrape."""

    sessions: int
    runs_in_progress: dict[str, int]
    live_grants: dict[str, int]
    pool_size: int
    pool_ready: int = 0
    """Started, never-used containers waiting in the warm pool."""
    pool_hits: int = 0
    """Runs that got a ready container, since the server started."""
    pool_misses: int = 0
    """Runs that found none ready and had one created."""
    kept_browsers: dict[str, int] = field(default_factory=dict)
    """Kept browsers open (`browse(keep=true)`), by tenant: each holds one container."""


class _LiveCollector(Collector):
    def __init__(self, read: Callable[[], LiveState | None]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        state = self.read()
        if state is None:  # starting or stopping: report nothing rather than zeros
            return
        yield GaugeMetricFamily("airlock_live_sessions", "Session leases alive.", state.sessions)
        running = GaugeMetricFamily(
            "airlock_runs_in_progress",
            "Runs executing now; each holds one container.",
            labels=["tenant"],
        )
        for tenant, count in sorted(state.runs_in_progress.items()):
            running.add_metric([tenant], count)
        yield running
        grants = GaugeMetricFamily(
            "airlock_live_grants", "Grants neither expired nor revoked.", labels=["tenant"]
        )
        for tenant, count in sorted(state.live_grants.items()):
            grants.add_metric([tenant], count)
        yield grants
        yield GaugeMetricFamily(
            "airlock_pool_size", "Warm containers the pool keeps per profile.", state.pool_size
        )
        yield GaugeMetricFamily(
            "airlock_pool_ready", "Warm containers ready now.", state.pool_ready
        )
        yield CounterMetricFamily(
            "airlock_pool_hits", "Runs that got a warm container.", state.pool_hits
        )
        yield CounterMetricFamily(
            "airlock_pool_misses", "Runs that found no warm container.", state.pool_misses
        )
        kept = GaugeMetricFamily(
            "airlock_kept_browsers", "Kept browsers open, each a container.", labels=["tenant"]
        )
        for tenant, count in sorted(state.kept_browsers.items()):
            kept.add_metric([tenant], count)
        yield kept
        yield GaugeMetricFamily(
            "airlock_live_containers",
            "Containers of this server: one per run in progress plus the warm ones.",
            sum(state.runs_in_progress.values()) + state.pool_ready,
        )


class Metrics:
    """The registry of one server, and the listener that feeds it from events."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._runs = Counter(
            "airlock_runs", "Finished runs.", ["tenant", "status"], registry=self.registry
        )
        # Browse runs count in airlock_runs too; this says how many of them were browses.
        self._browses = Counter(
            "airlock_browse_runs",
            "Finished browse runs (also counted in airlock_runs).",
            ["tenant", "status"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "airlock_run_duration_seconds",
            "Wall-clock time of finished runs.",
            ["tenant"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._egress = Counter(
            "airlock_egress_decisions",
            "Egress proxy decisions (allow, deny, error).",
            ["tenant", "decision"],
            registry=self.registry,
        )
        self._capabilities = Counter(
            "airlock_capability_decisions",
            "Answers to request_capability (granted, denied, pending).",
            ["tenant", "outcome"],
            registry=self.registry,
        )
        self._live = _LiveCollector(lambda: None)
        self.registry.register(self._live)

    def watch(self, read: Callable[[], LiveState | None]) -> None:
        """Report the gauges `read` returns at each scrape."""
        self._live.read = read

    def observe(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            run = event.run
            self._runs.labels(run.tenant, run.status).inc()
            if run.language == "browse":
                self._browses.labels(run.tenant, run.status).inc()
            if run.duration_ms is not None:
                self._duration.labels(run.tenant).observe(run.duration_ms / 1000)
            for record in event.egress:
                self._egress.labels(run.tenant, record.decision).inc()
        elif isinstance(event, CapabilityDecided):
            self._capabilities.labels(event.tenant, event.outcome).inc()

    def render(self, tenant: str | None = None) -> bytes:
        """Every series, or with `tenant` only the series labelled with that tenant (a
        tenant's key must not learn another's names or counts, nor the server-wide totals)."""
        if tenant is None:
            return generate_latest(self.registry)
        return generate_latest(_TenantView(self.registry, tenant))


class _TenantView(Collector):
    """The series of one tenant, for `generate_latest`."""

    def __init__(self, registry: CollectorRegistry, tenant: str) -> None:
        self.registry = registry
        self.tenant = tenant

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            # A server-wide family (its samples carry no tenant) is the operator's alone; a
            # tenant's family is shown even with no sample of this tenant yet, as Prometheus
            # clients do, so a scrape before the first run is not an empty body.
            if any("tenant" not in s.labels for s in family.samples):
                continue
            mine = Metric(family.name, family.documentation, family.type, family.unit)
            mine.samples = [s for s in family.samples if s.labels.get("tenant") == self.tenant]
            yield mine


def parse_listen(
    value: str, option: str = "--metrics-listen", example: str = "127.0.0.1:9464"
) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) for `--metrics-listen` (or another such `option`)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidRequest(f"{option} {value!r} is not HOST:PORT; write e.g. {example}")
    return host, int(port)


def serve_metrics(metrics: Metrics, listen: str) -> None:
    """Serve /metrics on its own address (no auth there: bind it where only your scraper
    can reach it), answering only requests named for that address, so a web page that
    rebinds a name of its own to it reads nothing. A daemon thread; it ends with the
    process."""
    host, port = parse_listen(listen)
    app = _for_own_address(make_wsgi_app(metrics.registry), _own_hosts(host, port))
    try:
        server = make_server(host, port, app, _Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise InvalidRequest(f"cannot serve metrics on {listen}: {exc.strerror}") from exc
    threading.Thread(target=server.serve_forever, name="airlock-metrics", daemon=True).start()
    log.info("serving Prometheus metrics on http://%s/metrics", listen)


def _own_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers a scraper of `host:port` sends (a loopback address's usual names)."""
    names = {host.lower()}
    if _is_loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    return frozenset(f"[{name}]:{port}" if ":" in name else f"{name}:{port}" for name in names)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _for_own_address(app: WSGIApp, hosts: frozenset[str]) -> WSGIApp:
    def checked(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if str(environ.get("HTTP_HOST", "")).lower() not in hosts:
            start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
            return [b"this metrics address answers only requests named for it\n"]
        return app(environ, start_response)

    return checked


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: one line every few seconds says nothing."""

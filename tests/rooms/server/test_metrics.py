"""Prometheus metrics: fed by run and capability events, served on /metrics to the
operator token (every series) and to bearer keys (their own tenant's series), or on a
separate address the operator chooses."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import client, free_port, http_server

from airlock.errors import InvalidRequest
from airlock.server.metrics import LiveState, Metrics, parse_listen, serve_metrics
from airlock.store import EgressRecord, RunRecord
from airlock.tools.events import CapabilityDecided, RunFinished


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _run(status: str, duration_ms: int, language: str = "python") -> RunRecord:
    return RunRecord(
        id="run_a",
        session_id="ses_a",
        tenant="acme",
        language=language,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        created_at=0,
        timeout_s=30,
        limits={},
        code_sha256="0" * 64,
        duration_ms=duration_ms,
    )


def _egress(decision: str) -> EgressRecord:
    return EgressRecord(
        time=0,
        tenant="acme",
        session_id="ses_a",
        run_id="run_a",
        capability=None,
        method="GET",
        host="example.com",
        port=443,
        path="/",
        status=403,
        bytes_in=0,
        bytes_out=0,
        duration_ms=1,
        decision=decision,  # type: ignore[arg-type]
        reason="r",
    )


def test_events_become_counters_histograms_and_live_gauges() -> None:
    metrics = Metrics()
    metrics.observe(RunFinished(_run("ok", 1500), "runc", (_egress("allow"), _egress("deny"))))
    metrics.observe(RunFinished(_run("timeout", 30_000), "runsc", ()))
    metrics.observe(RunFinished(_run("ok", 4000, language="browse"), "runsc", ()))
    metrics.observe(CapabilityDecided("acme", "ses_a", "gh", "denied"))
    found = samples(metrics.render().decode())
    assert found[("airlock_browse_runs_total", (("status", "ok"), ("tenant", "acme")))] == 1
    assert ("airlock_browse_runs_total", (("status", "timeout"), ("tenant", "acme"))) not in found
    assert found[("airlock_runs_total", (("status", "ok"), ("tenant", "acme")))] == 2
    assert found[("airlock_runs_total", (("status", "timeout"), ("tenant", "acme")))] == 1
    assert found[("airlock_run_duration_seconds_count", (("tenant", "acme"),))] == 3
    assert found[("airlock_run_duration_seconds_sum", (("tenant", "acme"),))] == 35.5
    assert found[("airlock_run_duration_seconds_bucket", (("le", "2.5"), ("tenant", "acme")))] == 1
    assert (
        found[("airlock_egress_decisions_total", (("decision", "deny"), ("tenant", "acme")))] == 1
    )
    outcome = (("outcome", "denied"), ("tenant", "acme"))
    assert found[("airlock_capability_decisions_total", outcome)] == 1
    assert ("airlock_live_sessions", ()) not in found  # nothing live to read yet

    metrics.watch(lambda: LiveState(3, {"acme": 2}, {"acme": 1}, 4, 3, 10, 2, {"acme": 1}))
    found = samples(metrics.render().decode())
    assert found[("airlock_live_sessions", ())] == 3
    assert found[("airlock_kept_browsers", (("tenant", "acme"),))] == 1
    assert found[("airlock_runs_in_progress", (("tenant", "acme"),))] == 2
    assert found[("airlock_live_grants", (("tenant", "acme"),))] == 1
    assert found[("airlock_pool_size", ())] == 4
    assert found[("airlock_pool_ready", ())] == 3
    assert found[("airlock_pool_hits_total", ())] == 10
    assert found[("airlock_pool_misses_total", ())] == 2
    assert found[("airlock_live_containers", ())] == 5


@pytest.mark.parametrize("bad", ["9464", "127.0.0.1", "127.0.0.1:x", ":9464", "h:70000"])
def test_a_bad_metrics_address_is_refused_naming_the_form(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="HOST:PORT"):
        parse_listen(bad)
    assert parse_listen("[::1]:9464") == ("::1", 9464)


def test_a_tenants_view_holds_its_own_series_only() -> None:
    metrics = Metrics()
    metrics.observe(RunFinished(_run("ok", 1500), "runc", (_egress("allow"),)))
    metrics.observe(CapabilityDecided("globex", "ses_g", "gh", "denied"))
    metrics.watch(lambda: LiveState(3, {"acme": 2, "globex": 1}, {"acme": 1}, 4, 3, 10, 2))
    acme = samples(metrics.render("acme").decode())
    globex = samples(metrics.render("globex").decode())
    everything = samples(metrics.render().decode())
    assert acme and globex
    assert all(dict(labels).get("tenant") == "acme" for _, labels in acme)
    assert all(dict(labels).get("tenant") == "globex" for _, labels in globex)
    assert acme[("airlock_runs_total", (("status", "ok"), ("tenant", "acme")))] == 1
    assert globex[("airlock_runs_in_progress", (("tenant", "globex"),))] == 1
    # Server-wide numbers count every tenant: only the operator's view has them.
    assert ("airlock_live_sessions", ()) not in acme
    assert everything[("airlock_live_sessions", ())] == 3
    assert set(acme) | set(globex) < set(everything)


def test_a_tenants_view_before_its_first_run_lists_the_families_with_no_samples() -> None:
    metrics = Metrics()
    metrics.observe(RunFinished(_run("ok", 1500), "runc", (_egress("allow"),)))  # acme's
    metrics.watch(lambda: LiveState(3, {"acme": 2}, {"acme": 1}, 4, 3, 10, 2))
    text = metrics.render("globex").decode()
    assert samples(text) == {}
    for family in ("airlock_runs_total", "airlock_runs_in_progress", "airlock_live_grants"):
        assert f"# TYPE {family} " in text, text
    assert "airlock_live_sessions" not in text  # server-wide: the operator's view only
    assert "acme" not in text


@pytest.mark.anyio
@pytest.mark.docker
async def test_metrics_need_a_token_over_http_and_count_a_tenants_run(tmp_path: Path) -> None:
    port = free_port()
    async with (
        http_server(tmp_path, "--metrics-listen", f"127.0.0.1:{port}") as server,
        httpx.AsyncClient() as probe,
    ):
        anonymous = await probe.get(f"{server.base}/metrics")
        forged = await probe.get(
            f"{server.base}/metrics", headers={"Authorization": "Bearer alk_not-a-key"}
        )
        async with client(server, "acme", "auto") as acme:
            ran = await acme.call_tool("run_code", {"code": "print(1)"})
            assert not ran.is_error, ran.content
            operator = (server.data_dir / "operator-token").read_text().strip()
            scraped = await probe.get(
                f"{server.base}/metrics", headers={"Authorization": f"Bearer {operator}"}
            )
            globex = await probe.get(
                f"{server.base}/metrics",
                headers={"Authorization": f"Bearer {server.keys['globex']}"},
            )
        separate = await probe.get(f"http://127.0.0.1:{port}/metrics")
    assert anonymous.status_code == 401 and forged.status_code == 401
    assert "airlock_runs" not in anonymous.text
    assert globex.status_code == 200 and "acme" not in globex.text
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    found = samples(scraped.text)
    assert found[("airlock_runs_total", (("status", "ok"), ("tenant", "acme")))] == 1
    assert found[("airlock_run_duration_seconds_count", (("tenant", "acme"),))] == 1
    assert found[("airlock_live_sessions", ())] >= 1
    # The default pool: the run took a warm container or counted a miss, and refills.
    pool = found[("airlock_pool_hits_total", ())] + found[("airlock_pool_misses_total", ())]
    assert pool == 1 and found[("airlock_pool_size", ())] == 4
    assert found[("airlock_live_containers", ())] == found[("airlock_pool_ready", ())]
    assert separate.status_code == 200
    assert (
        samples(separate.text)[("airlock_runs_total", (("status", "ok"), ("tenant", "acme")))] == 1
    )


def test_the_separate_metrics_address_answers_only_requests_named_for_it() -> None:
    """A page that rebinds a name of its own to 127.0.0.1 sends its own name as Host: the
    metrics of every tenant must not reach it (the listener had no check at all)."""
    port = free_port()
    serve_metrics(Metrics(), f"127.0.0.1:{port}")
    answers = {}
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"rebind.attacker.test:{port}", ""):
        with httpx.Client() as probe:
            answers[host] = probe.get(f"http://127.0.0.1:{port}/metrics", headers={"Host": host})
    assert answers[f"127.0.0.1:{port}"].status_code == 200
    assert "airlock_" in answers[f"127.0.0.1:{port}"].text
    assert answers[f"localhost:{port}"].status_code == 200
    assert answers[f"rebind.attacker.test:{port}"].status_code == 421
    assert answers[""].status_code == 421
    assert "airlock_" not in answers[f"rebind.attacker.test:{port}"].text

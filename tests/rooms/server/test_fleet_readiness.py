"""Liveness and readiness of a real `airlock serve --http` replica on the real PostgreSQL:
while it has lost its claim on the fleet's database it refuses every call, so `/readyz`
fails (503, with the reason) and a load balancer stops sending it calls, while `/livez`
and `/healthz` hold (restarting it would only end its runs); once it claims again it is
ready by itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import postgres
import pytest
from support import NO_POOL_TOML, serving_http, vault_key_file

from airlock.broker.vault import KEY_FILE_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def until(probe: Callable[[], Awaitable[bool]], within: float) -> None:
    with anyio.fail_after(within):
        while True:
            if await probe():
                return
            await anyio.sleep(0.1)


async def test_readyz_fails_with_a_reason_while_the_claim_is_lost_and_livez_holds(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    monkeypatch.setenv("AIRLOCK_STORE_URL", postgres_url)
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_POOL_TOML)
    name = postgres_url.rsplit("/", 1)[1]
    admin = postgres.with_database(postgres_url, "postgres")

    async def psql(sql: str) -> str:
        return await anyio.to_thread.run_sync(postgres.psql, admin, sql)

    args = ("--data-dir", str(tmp_path / "a"), "--policy", str(policy))
    async with serving_http(*args) as a, httpx.AsyncClient(base_url=a.base) as http:
        for path in ("/livez", "/healthz", "/readyz"):
            answer = await http.get(path)
            assert answer.status_code == 200, (path, answer.text)
        assert (await http.get("/readyz")).json() == {"status": "ready"}

        await psql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        try:
            await psql(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            )
            # The store fails first (its pooled connection was cut), then within the
            # claim's heartbeat the claim: each is a 503 with its reason, never a 200.
            reasons: list[str] = []

            async def claim_lost() -> bool:
                answer = await http.get("/readyz", timeout=10)
                assert answer.status_code == 503, answer.text
                assert answer.json()["status"] == "unavailable"
                reasons.append(answer.json()["reason"])
                assert password not in answer.text
                return "lost its connection to the database" in reasons[-1]

            password = postgres_url.split(":")[2].split("@")[0]
            await until(claim_lost, within=20)
            assert "retry" in reasons[-1]
            for reason in reasons[:-1]:
                assert f"/{name}" in reason, reason  # the store's own error, naming it
            # Alive all along: an orchestrator must not restart it.
            for path in ("/livez", "/healthz"):
                answer = await http.get(path)
                assert (answer.status_code, answer.json()) == (200, {"status": "ok"}), path
        finally:
            await psql(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")

        async def ready() -> bool:
            return (await http.get("/readyz", timeout=10)).status_code == 200

        await until(ready, within=30)

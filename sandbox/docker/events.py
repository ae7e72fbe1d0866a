"""Follows the Docker engine's container events on behalf of the warm pool.

A pooled container that dies while it waits (`docker kill`, the OOM killer) leaves the
pool when its `die` event arrives, and is removed. When the event stream breaks, the
engine stopped or restarted, and the pooled containers went with it or may have: the
pool drops them all and hands out none until the engine answers again; then they are
removed and the pool refills. Only the pool's bookkeeping is decided here. The check
that the container a call takes is running lives in `attach.py` (`attach_if_running`),
because an event arrives after the fact.

The SDK reads the stream blocking, so it is read in a worker thread of its own; on
cancellation the stream is closed from the event loop, which ends that thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import docker
import docker.errors
import requests

from ..pool import WarmPool

log = logging.getLogger(__name__)

# How often an engine that went away is asked again; a call meanwhile creates its own
# container (and hears `EngineUnavailable` while the engine is down).
RECONNECT_S = 0.5


class EngineWatch:
    """Keeps `pool` true to the engine for as long as `run` runs."""

    def __init__(
        self,
        client: docker.DockerClient,
        label: str,
        pool: WarmPool,
        remove_many: Callable[[list[str]], Coroutine[Any, Any, None]],
    ) -> None:
        self._client = client
        # Only this server's containers: the pool's ids are all among them.
        self._filters = {"type": ["container"], "event": ["die"], "label": [label]}
        self._pool = pool
        self._remove_many = remove_many
        self._connected = True
        # Dropped with the engine; removed once it answers again.
        self._lost: list[str] = []
        # The reader holds a thread for as long as the engine is up; not one of the
        # engine calls' or the default limiter's.
        self._reader = anyio.CapacityLimiter(1)
        self._tasks: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        """Until cancelled: follow the events, and after a break wait for the engine."""
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            while True:
                try:
                    events = await self._subscribe()
                except docker.errors.APIError as exc:
                    # An engine that answers but will not stream events: the pool goes on
                    # with the check at take alone, rather than stop for good.
                    log.warning(
                        "the Docker engine refused its event stream (%s); the warm pool "
                        "cannot hear of dead containers and checks each as it is taken",
                        exc.explanation,
                    )
                    self._engine_back()
                    return
                if events is None:
                    self._engine_lost()
                    await anyio.sleep(RECONNECT_S)
                    continue
                self._engine_back()
                try:
                    await anyio.to_thread.run_sync(
                        self._read, events, abandon_on_cancel=True, limiter=self._reader
                    )
                except Exception as exc:
                    # The stream broke in a way the SDK does not turn into its end.
                    log.debug("the engine's event stream failed: %r", exc)
                finally:
                    _close(events)
                self._engine_lost()

    async def _subscribe(self) -> Iterator[Any] | None:
        """The event stream, or None while the engine cannot be reached."""
        try:
            events: Iterator[Any] = await anyio.to_thread.run_sync(
                lambda: self._client.api.events(filters=self._filters, decode=True),
                abandon_on_cancel=True,
            )
        except docker.errors.APIError as exc:
            if exc.response is not None:
                raise
            return None
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None
        return events

    def _read(self, events: Iterator[Any]) -> None:
        for event in events:
            container_id = event.get("id") if isinstance(event, dict) else None
            if isinstance(container_id, str):
                anyio.from_thread.run_sync(self._died, container_id)

    def _died(self, container_id: str) -> None:
        if self._pool.discard(container_id) and self._tasks is not None:
            log.info("warm pool: pooled container %s died; replacing it", container_id[:12])
            self._tasks.start_soon(self._remove_many, [container_id])

    def _engine_lost(self) -> None:
        if not self._connected:
            return
        self._connected = False
        dropped = self._pool.lose_engine()
        self._lost.extend(dropped)
        log.warning(
            "lost the Docker engine's event stream (it stopped or restarted): dropped %d "
            "pooled container(s); calls create their own until the engine answers again",
            len(dropped),
        )

    def _engine_back(self) -> None:
        if self._connected:
            return
        self._connected = True
        log.info("the Docker engine answers again; refilling the warm pool")
        lost, self._lost = self._lost, []
        if lost and self._tasks is not None:
            self._tasks.start_soon(self._remove_many, lost)
        self._pool.engine_back()


def _close(events: Iterator[Any]) -> None:
    """Close the stream, which ends a reader blocked on it."""
    close = getattr(events, "close", None)
    if close is None:
        return
    try:
        close()
    except (docker.errors.DockerException, OSError, AttributeError, UnboundLocalError) as exc:
        # An SSH engine's streams cannot be cancelled; the reader then ends with the
        # stream's next event or with the engine.
        log.debug("cannot close the engine's event stream: %r", exc)

"""Trying again after a failure: the one way the store waits and retries. A replica's claim
and notice connections after a loss (jittered backoff, forever), a notice sent once more on
a fresh connection, a SERIALIZABLE transaction PostgreSQL aborted for a conflict (at once,
a few times). Each is a tenacity retrier: `await backoff(...)(fn, *args)` or
`at_once(...)(fn, *args)` calls `fn` until it returns, and the last failure is raised as it
was, so each caller still says in its own words what failed.

Why tenacity: it covers the async and the blocking case with one model (our loops run on
anyio, whose `sleep` it takes, and in worker threads), takes any wait function, so the
backoff keeps its shape here (below), ships type hints (`py.typed`) and is maintained.
stamina, built on it, adds defaults that do not fit these loops (a 45 s timeout, 10
attempts) and a log line per retry through global hooks, where these loops say their own.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import anyio
import tenacity

Failures = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""What is tried again: exception types, or a test of the exception."""


def jittered(first_s: float, max_s: float) -> Callable[[tenacity.RetryCallState], float]:
    """The wait before each new try: `first_s`, doubling up to `max_s`, each drawn from the
    upper half of its value, so replicas that lost the database together do not come back
    in step, and none waits less than half its turn."""

    def wait(state: tenacity.RetryCallState) -> float:
        step = min(first_s * 2.0 ** (state.attempt_number - 1), max_s)
        return step * random.uniform(0.5, 1.0)

    return wait


async def first_pause(first_s: float) -> None:
    """The wait before the first try again of something just lost (a claim or notice
    connection): the database that dropped it is rarely back within a millisecond, and the
    replicas that lost it together should not all come back in the same instant. Drawn as
    `jittered`'s first step."""
    await anyio.sleep(first_s * random.uniform(0.5, 1.0))


def _retry_on(on: Failures) -> tenacity.retry_base:
    if isinstance(on, (type, tuple)):
        return tenacity.retry_if_exception_type(on)
    return tenacity.retry_if_exception(on)


def backoff(
    *,
    on: Failures,
    first_s: float = 0.0,
    max_s: float = 0.0,
    tries: int | None = None,
    failed: Callable[[BaseException], object] | None = None,
) -> tenacity.AsyncRetrying:
    """An async retrier: a failure that `on` takes is tried again after a `jittered` wait
    (none with the defaults), forever or up to `tries` tries in all; `failed` hears each
    failure that is tried again. Anything else, cancellation included, leaves at once."""

    def said(state: tenacity.RetryCallState) -> None:
        if failed is not None and state.outcome is not None:
            exc = state.outcome.exception()
            if exc is not None:
                failed(exc)

    return tenacity.AsyncRetrying(
        retry=_retry_on(on),
        wait=jittered(first_s, max_s),
        stop=tenacity.stop_never if tries is None else tenacity.stop_after_attempt(tries),
        sleep=anyio.sleep,
        before_sleep=said,
        reraise=True,
    )


def at_once(*, on: Failures, tries: int) -> tenacity.Retrying:
    """A blocking retrier (for worker threads): a failure that `on` takes is tried again at
    once, up to `tries` tries in all."""
    return tenacity.Retrying(
        retry=_retry_on(on),
        stop=tenacity.stop_after_attempt(tries),
        wait=tenacity.wait_none(),
        reraise=True,
    )

"""The store's one retry helper (`store/retry.py`): what it tries again, how long it waits,
and that anything else, cancellation included, leaves at once."""

from __future__ import annotations

import anyio
import pytest
import tenacity

from airlock.store import retry

pytestmark = pytest.mark.anyio


class Flaky:
    """Fails `times` times with `error`, then answers."""

    def __init__(self, times: int, error: type[Exception] = ConnectionError) -> None:
        self.left = times
        self.calls = 0
        self.error = error

    def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error("down")
        return "up"

    async def call(self) -> str:
        return self()


def test_the_wait_doubles_to_its_cap_and_stays_in_the_upper_half_of_each_step() -> None:
    wait = retry.jittered(0.05, 1.0)
    for attempt, step in [(1, 0.05), (2, 0.1), (3, 0.2), (5, 0.8), (6, 1.0), (30, 1.0)]:
        state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        state.attempt_number = attempt
        waits = [wait(state) for _ in range(200)]
        assert all(step / 2 <= w <= step for w in waits), (attempt, min(waits), max(waits))
        assert max(waits) - min(waits) > step / 10  # jittered, not one value


async def test_backoff_tries_again_until_it_answers_and_says_each_failure() -> None:
    flaky = Flaky(3)
    heard: list[BaseException] = []
    with anyio.fail_after(5):
        got: str = await retry.backoff(
            on=ConnectionError, first_s=0.01, max_s=0.02, failed=heard.append
        )(flaky.call)
    assert (got, flaky.calls, [str(e) for e in heard]) == ("up", 4, ["down"] * 3)


async def test_backoff_raises_the_last_failure_itself_after_its_tries() -> None:
    flaky = Flaky(5)
    with pytest.raises(ConnectionError, match="down"):
        await retry.backoff(on=ConnectionError, tries=2)(flaky.call)
    assert flaky.calls == 2


async def test_a_failure_it_does_not_take_leaves_at_once() -> None:
    flaky = Flaky(1, error=KeyError)
    with pytest.raises(KeyError):
        await retry.backoff(on=lambda exc: isinstance(exc, ConnectionError))(flaky.call)
    assert flaky.calls == 1


async def test_a_retrier_that_waits_forever_is_cancelled_as_anyio_cancels() -> None:
    flaky = Flaky(10**9)
    with anyio.move_on_after(0.3) as scope:
        await retry.backoff(on=ConnectionError, first_s=0.01, max_s=0.05)(flaky.call)
    assert scope.cancelled_caught and 2 < flaky.calls < 100


def test_at_once_retries_in_a_thread_without_waiting() -> None:
    flaky = Flaky(7)
    assert retry.at_once(on=ConnectionError, tries=8)(flaky) == "up"
    assert flaky.calls == 8
    with pytest.raises(ConnectionError):
        retry.at_once(on=ConnectionError, tries=8)(Flaky(8))


async def test_the_first_pause_waits_half_to_all_of_the_first_step() -> None:
    for _ in range(3):
        started = anyio.current_time()
        await retry.first_pause(0.2)
        assert 0.1 <= anyio.current_time() - started < 1.0

"""The one place where Airlock errors become MCP tool errors.

Anything the model can read and correct (a bad path, a limit, an unknown id) is a
tool error with one sentence saying what to do; a non-zero exit of the user's
code is not an error at all. Unexpected exceptions are left to the SDK, which
returns a generic error and logs the traceback.
"""

from __future__ import annotations

import logging
from types import TracebackType

from mcp.server.mcpserver.exceptions import ToolError

from airlock.errors import AirlockError, RunnerFailed, StoreError, StoreUnavailable, VaultError

from .envelope import new_nonce, wrap

log = logging.getLogger(__name__)


class tool_errors:
    """Translate Airlock errors raised in the block; never swallows anything.

    A class rather than a generator context manager so type checkers know the block's
    exceptions always propagate (and tool functions need no unreachable returns).
    """

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, StoreUnavailable):
            # Not a broken record: the caller can act on it (retry, another server).
            raise ToolError(str(exc)) from exc
        if isinstance(exc, StoreError | VaultError):
            log.error("storage failure: %s", exc, exc_info=exc)
            raise ToolError(
                "Airlock could not read or write its records; the operator should check the "
                "server log and `airlock doctor`."
            ) from exc
        if isinstance(exc, RunnerFailed) and exc.reported:
            # What the container said is the sandbox's text: data, never instructions.
            reported = wrap(exc.reported, run_id=exc.run_id, stream="runner", nonce=new_nonce())
            raise ToolError(f"{exc}. The runner reported:\n{reported}") from exc
        if isinstance(exc, AirlockError):
            raise ToolError(str(exc)) from exc

"""The one place where Airlock errors become the sentences a model reads as tool errors.

Anything the model can read and correct (a bad path, a limit, an unknown id) is a tool
error with one sentence saying what to do; a non-zero exit of the user's code is not an
error at all. Unexpected exceptions get no sentence: the transport returns a generic error
and logs the traceback. Transport-neutral: the server raises what the sentence becomes on
its transport (server/registration/errors.py raises the MCP SDK's `ToolError`).
"""

from __future__ import annotations

import logging

from airlock.errors import AirlockError, RunnerFailed, StoreError, StoreUnavailable, VaultError

from .envelope import new_nonce, wrap

log = logging.getLogger(__name__)

STORAGE_FAILURE = (
    "Airlock could not read or write its records; the operator should check the "
    "server log and `airlock doctor`."
)


def tool_error_text(exc: BaseException) -> str | None:
    """The one sentence the model reads for `exc`, or None for an exception that is not
    Airlock's (a defect: the transport's generic error, the traceback in the log)."""
    if isinstance(exc, StoreUnavailable):
        # Not a broken record: the caller can act on it (retry, another server).
        return str(exc)
    if isinstance(exc, StoreError | VaultError):
        log.error("storage failure: %s", exc, exc_info=exc)
        return STORAGE_FAILURE
    if isinstance(exc, RunnerFailed) and exc.reported:
        # What the container said is the sandbox's text: data, never instructions.
        reported = wrap(exc.reported, run_id=exc.run_id, stream="runner", nonce=new_nonce())
        return f"{exc}. The runner reported:\n{reported}"
    if isinstance(exc, AirlockError):
        return str(exc)
    return None

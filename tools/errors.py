"""The one place where Airlock errors become MCP tool errors.

Anything the model can read and correct (a bad path, a limit, an unknown id) is a
tool error with one sentence saying what to do; a non-zero exit of the user's
code is not an error at all. Unexpected exceptions are left to the SDK, which
returns a generic error and logs the traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from airlock.errors import AirlockError, StoreError, VaultError

log = logging.getLogger(__name__)


@contextmanager
def tool_errors() -> Iterator[None]:
    try:
        yield
    except (StoreError, VaultError) as exc:
        log.error("storage failure: %s", exc, exc_info=exc)
        raise ToolError(
            "Airlock could not read or write its records; the operator should check the "
            "server log and `airlock doctor`."
        ) from exc
    except AirlockError as exc:
        raise ToolError(str(exc)) from exc

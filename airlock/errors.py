"""The one error hierarchy of Airlock.

    AirlockError
    ├── InvalidRequest        the caller can fix it: say what to change
    │   ├── UnsafePath        absolute, `..`, NUL, or otherwise escaping path
    │   ├── LimitExceeded     a request above what the policy allows
    │   │   └── QuotaExceeded a grant beyond a live-capability quota, or a request beyond a
    │   │                     session's pending approvals
    │   └── CapabilityDenied  a capability request the policy or the human refused
    ├── ApprovalPending       a capability request now waits for the operator's decision
    ├── NotFound              unknown id; also anything of another session or tenant
    ├── SessionEnded          the session ended while a call in it was running
    ├── RunEndedByFleet       another replica ended the run while this one had lost its claim
    ├── ConfigFileInvalid     an operator's file with problems (all of them listed)
    │   ├── PolicyInvalid     a policy file
    │   └── AuthConfigInvalid the auth config file
    ├── AddressInUse          the port to serve on is taken (the CLI exits 2)
    ├── SandboxError          the engine side failed, not the user's code
    │   ├── EngineUnavailable Docker is not reachable
    │   ├── ImageUnavailable  the sandbox image is missing and could not be built
    │   ├── ImageBuilding     the sandbox image is being built; retry in about N s
    │   └── RunnerFailed      the in-container runner broke its protocol
    ├── EgressUnavailable     a run's egress could not be set up
    ├── StoreError            the database or the blob store failed
    │   └── StoreUnavailable  this server lost its database: it takes no calls until back
    └── VaultError            the secret vault or its key cannot be read, written or decrypted

Lower-layer exceptions (docker, sqlite3, OSError) are translated into these at the
room boundary with `raise ... from exc`; `tools/errors.py` maps these to MCP tool
errors in one place. Messages are written for the reader who must act on them.
"""

from __future__ import annotations


class AirlockError(Exception):
    """Root of every error Airlock raises on purpose."""


class InvalidRequest(AirlockError):
    """The request cannot be carried out as asked; the message says what to change."""


class UnsafePath(InvalidRequest):
    """A path that is absolute, climbs with `..`, or is otherwise not a plain relative path."""


class LimitExceeded(InvalidRequest):
    """A request above a limit of the active policy."""


class QuotaExceeded(LimitExceeded):
    """A new grant would exceed a quota of live capabilities, or a new request the
    session's quota of approvals pending; `quota` names which one."""

    def __init__(self, quota: str, limit: int, message: str) -> None:
        self.quota = quota
        self.limit = limit
        super().__init__(message)


class CapabilityDenied(InvalidRequest):
    """A capability request that the policy or the approving human refused; the message says why."""


class ApprovalPending(AirlockError):
    """A capability request that waits for the operator (the client could not ask its
    human); the message names the approval id, how long it waits and what to do next."""

    def __init__(self, approval_id: str, message: str) -> None:
        self.approval_id = approval_id
        super().__init__(message)


class NotFound(AirlockError):
    """No such run, artifact or session for this caller.

    Deliberately the same answer for an id that never existed and for one that
    belongs to someone else, so ids cannot be probed.
    """


class SessionEnded(AirlockError):
    """The session ended (end_session, expiry, shutdown) while a call in it was running."""


class RunEndedByFleet(AirlockError):
    """A run's end or workspace commit refused: its record was no longer open under this
    server's claim (a peer of the fleet ended it, or this server lost its claim and took it
    again), so what this server made of it is discarded; the message names the record."""

    def __init__(self, run_id: str, status: str, why: str | None) -> None:
        self.run_id = run_id
        self.status = status
        said = f" ({why})" if why else ""
        super().__init__(
            f"the fleet ended run {run_id} `{status}`{said} while this server had lost its "
            "claim on it; this server's result was discarded and nothing of it landed in the "
            "workspace: run the code again"
        )


class ConfigFileInvalid(AirlockError):
    """An operator's file that does not validate; `problems` lists every one of them.

    The message names the file and lists the problems, never a key or a token.
    """

    what = "config file"
    fix = "correct the file"
    """What to do, said after the problems (with `{source}` for the file's name)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        listing = "\n".join(f"  - {p}" for p in problems)
        fix = self.fix.format(source=source)
        super().__init__(f"invalid {self.what} {source}:\n{listing}\n  fix: {fix}")


class PolicyInvalid(ConfigFileInvalid):
    """A policy file that does not validate."""

    what = "policy"
    fix = (
        "correct the path or the file (`airlock policy check {source}` lists what is wrong "
        "without starting anything; `airlock policy init {source}` writes a valid one)"
    )


class AddressInUse(AirlockError):
    """The address `airlock serve --http` should listen on is taken by another process."""


class AuthConfigInvalid(ConfigFileInvalid):
    """An auth config file (API keys, JWT issuer, JWKS) that does not validate."""

    what = "auth config"
    fix = (
        "correct the path or the file (`airlock keys create TENANT --auth {source}` creates "
        "it, or adds a valid key entry to it)"
    )


class SandboxError(AirlockError):
    """The sandbox side failed (not the user's code)."""


class EngineUnavailable(SandboxError):
    """The container engine cannot be reached."""


class ImageUnavailable(SandboxError):
    """The sandbox image is missing and could not be built."""


class ImageBuilding(SandboxError):
    """The sandbox image is being built right now; the message says about how long is left."""


class RunnerFailed(SandboxError):
    """The in-container runner did not follow its protocol.

    `reported` is what the container said about it: text from inside the sandbox,
    never shown without the untrusted-output envelope.
    """

    def __init__(self, message: str, *, run_id: str, reported: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.reported = reported


class EgressUnavailable(AirlockError):
    """The run's egress could not be set up (socket, CA); the message names the fix."""


class StoreError(AirlockError):
    """The database or the blob store failed."""


class StoreUnavailable(StoreError):
    """This server of a fleet lost its connection to the database (its claim on its runs
    with it), so it takes no call it could not record; the message says to retry or use
    another server."""


class VaultError(AirlockError):
    """The secret vault or its key cannot be read, written or decrypted.

    An operator problem (key file, permissions, a vault written with another key), never
    the agent's; the message names the file and the fix, and never a secret value.
    """

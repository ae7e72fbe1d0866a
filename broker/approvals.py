"""The approval state machine: the one owner of which moves a pending approval may make.

    pending ──decide──> approved ──claim──> used ──release──> approved
       │  ├───decide──> denied
       │  └───answer──> used (the client's human approved) | denied
       └──(its wait passed, or its session ended)──> expired

`answer` is the other side of a request both the operator and the asking client may
answer (an MCP task in `input_required`, `server/tasks`): the client's human answered
first, so the operator has nothing left to decide, and the approval never counts again.

A pending approval can be decided once, by the operator, while its wait has not passed
and the session that asked is live; past its wait it counts as expired (fail closed)
whether or not a sweep has marked it yet. Only an approved one can be claimed, once, by
the session that asked; a claim whose grant then failed is released, so the approval
stays usable. Denied and expired are final. Every move is one conditional UPDATE of the
store (`Database.move_approval`), so the server and `airlock approvals` (another process)
racing for one approval find exactly one winner.

Not here: who may see or move which approval (tenant, session, capability: the callers'
checks), recording a new request and its quotas (`tools.approvals`), and the words: each
move returns why it refused, and the agent's side (`tools.approvals`) and the operator's
(`server.approvals`) each say it to their reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airlock.store import ApprovalRecord, ApprovalStatus, Database

CLIENT = "the client (tasks/update)"
"""Who decided an approval its asking client answered (`answer`)."""

Refusal = Literal["not_pending", "expired", "session_ended", "lost"]
"""Why a decision did not happen: the approval is no longer pending (its status says
what it is), its wait passed, the session that asked ended, or another decision or the
expiry won meanwhile."""

Claim = Literal["claimed", "pending", "denied", "expired", "used"]
"""What claiming found: `claimed` by this call, else the status that refused it."""


@dataclass(frozen=True)
class Refused:
    """A decision the state machine refused, with the approval as it was."""

    why: Refusal
    record: ApprovalRecord


def status_at(record: ApprovalRecord, now: float) -> ApprovalStatus:
    """The approval's status at `now`: a pending one past its wait is expired already."""
    if record.status == "pending" and record.expires_at <= now:
        return "expired"
    return record.status


async def expire(
    db: Database, *, now: float, session_id: str | None = None
) -> list[ApprovalRecord]:
    """Mark expired every pending approval past its wait (or every pending one of
    `session_id`, which ended); the ones it marked, as they were."""
    return await db.expire_approvals(now=now, session_id=session_id)


async def decide(
    db: Database, record: ApprovalRecord, *, approve: bool, by: str, now: float
) -> ApprovalRecord | Refused:
    """The operator's move: pending to approved (or denied); the record after, or why not.
    Finding the approval expired (by its wait or its session's end) marks it so."""
    if record.status != "pending":
        return Refused("not_pending", record)
    if status_at(record, now) == "expired":
        await expire(db, now=now)
        return Refused("expired", record)
    session = await db.get_session(record.session_id)
    if session is None or session.ended_at is not None:
        await expire(db, now=now, session_id=record.session_id)
        return Refused("session_ended", record)
    moved = await db.move_approval(
        record.id,
        from_status="pending",
        to_status="approved" if approve else "denied",
        at=now,
        by=by,
        live_at=now,
    )
    if not moved:
        return Refused("lost", record)
    decided = await db.get_approval(record.id)
    assert decided is not None  # approvals are never deleted
    return decided


async def answer(db: Database, record: ApprovalRecord, *, approve: bool, now: float) -> bool:
    """The client's move on an approval it may answer as well as the operator: pending to
    used (its human approved; the call grants without the approval) or denied, by the
    client. False when the operator decided first, or it expired: then that stands."""
    if status_at(record, now) != "pending":
        return False
    return await db.move_approval(
        record.id,
        from_status="pending",
        to_status="used" if approve else "denied",
        at=now,
        by=CLIENT,
        live_at=now,
    )


async def claim(db: Database, record: ApprovalRecord, *, now: float) -> Claim:
    """The asking session's move: approved to used, once. One found past its wait is
    `expired` (the caller's sweep marks it, and audits it)."""
    status = status_at(record, now)
    if status != "approved":
        return status
    won = await db.move_approval(record.id, from_status="approved", to_status="used", at=now)
    return "claimed" if won else "used"


async def release(db: Database, approval_id: str, *, now: float) -> None:
    """Undo a claim whose grant failed (a quota, or the policy changed): approved again."""
    await db.move_approval(approval_id, from_status="used", to_status="approved", at=now)


async def record_grant(db: Database, approval_id: str, grant_id: str, *, now: float) -> None:
    """Note on a claimed approval the grant it became (its status stays `used`)."""
    await db.move_approval(
        approval_id, from_status="used", to_status="used", at=now, grant_id=grant_id
    )

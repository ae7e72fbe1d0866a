"""The session workspaces' records: versions committed atomically onto the head (merged
with what other writers changed meanwhile), forks and restores, and the hatch's copies and
patches. The merge itself is `store/workspace.py`'s, a sans-IO core."""

from __future__ import annotations

from ..queries import workspace
from ..records import HatchCopyRecord, PatchRecord, SessionRecord
from ..transactions import Transactions, checked_limit
from ..workspace import WorkspaceCommit, WorkspaceDelta, WorkspaceHead


class Workspaces(Transactions):
    """Session workspaces, hatch copies and patches."""

    async def workspace_head(self, session_id: str) -> WorkspaceHead:
        """The current version of a session's workspace and its entries, read together.

        A session without commits (or unknown) is version 0 with no entries.
        """
        return await self._read(lambda conn: workspace.head(conn, session_id))

    async def commit_workspace(
        self, session_id: str, delta: WorkspaceDelta, *, writer: str | None, at: float
    ) -> WorkspaceCommit:
        """Lay `delta` onto the session's current head in one transaction.

        `writer` (a run id, or another name such as a copy-in) is recorded as the last writer
        of every entry the commit changes. Paths other writers changed since
        `delta.base_version` merge as `store.workspace.merge` describes; every path where
        the two differ is in the result's `conflicts`. A commit that changes nothing makes
        no new version. Commits of one session are ordered, across servers too
        (`queries/workspace.py`). The session must exist (else `StoreError`).
        """
        return await self._write(lambda conn: workspace.commit(conn, session_id, delta, writer, at))

    async def fork_session(self, child: SessionRecord, *, at: float) -> None:
        """Create `child`, forked from `child.parent_id` at `child.parent_version`: its
        workspace is that version's, the same blobs, no content copied. A version the
        parent does not have is `InvalidRequest`."""
        await self._write(lambda conn: workspace.fork(conn, child, at))

    async def restore_workspace(
        self, session_id: str, version: int, *, writer: str, at: float
    ) -> WorkspaceCommit:
        """Commit a new version equal to version `version` of the session's own history
        (a fork's starts at its fork point); nothing of the history is rewritten."""
        return await self._write(
            lambda conn: workspace.restore(conn, session_id, version, writer, at)
        )

    async def workspace_versions(self, session_id: str) -> list[tuple[int, int, str | None, float]]:
        """(version, base version, writer, time) of each version of the session, oldest
        first: a fork's first is written by its parent, a restore's by "restore of ..."."""
        return await self._read(lambda conn: workspace.versions(conn, session_id))

    async def add_copy(self, rec: HatchCopyRecord) -> None:
        await self._write(lambda conn: workspace.add_copy(conn, rec))

    async def get_copy(self, copy_id: str) -> HatchCopyRecord | None:
        return await self._read(lambda conn: workspace.get_copy(conn, copy_id))

    async def add_patch(self, rec: PatchRecord) -> None:
        await self._write(lambda conn: workspace.add_patch(conn, rec))

    async def get_patch(self, patch_id: str) -> PatchRecord | None:
        return await self._read(lambda conn: workspace.get_patch(conn, patch_id))

    async def list_patches(
        self, *, session_id: str | None = None, limit: int = 50, except_tenant: str | None = None
    ) -> list[PatchRecord]:
        """Patches, newest first, of one session (or all), none of `except_tenant`."""
        limit = checked_limit(limit)
        return await self._read(
            lambda conn: workspace.list_patches(conn, session_id, limit, except_tenant)
        )

    async def find_patch(self, copy_id: str, source_sha256: str) -> PatchRecord | None:
        """The first patch of a copy made from exactly this source, if one was made already."""
        return await self._read(lambda conn: workspace.find_patch(conn, copy_id, source_sha256))

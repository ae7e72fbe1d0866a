"""The outgoing files' tar, member by member into blob drafts, as it arrives.

`Intake` sits behind the exchange: it is fed the runner's tar bytes (in a worker thread:
every call may write to disk), reads them with the sans-IO `TarReader`, and writes each
acceptable member's content to a draft in the run's staging area, hashed as it is
written. Nothing is held in memory but the chunk at hand, so what a run leaves costs the
server disk, not memory. A member is refused before a byte of it is written when it is
not a regular file, has an unsafe or reserved name, comes twice, or is over a cap
(count, per file, total, all by its declared size, which the reader holds it to). Once
the listing is known, `match` keeps only drafts listed as files with the same size and
hash; everything else is discarded, so no refused or unmatched content ever becomes a
blob. Drafts belong to the staging area, whose end removes whatever was not kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from airlock.errors import UnsafePath
from airlock.store import Draft, DraftWriter, Staging

from .file_transfer import RESERVED_PREFIX, safe_relative_path
from .spec import ArtifactCaps, OutputFile, WorkspaceEntry
from .tarstream import Chunk, Member, MemberEnd, TarDamaged, TarReader


class Intake:
    """Drafts of the files a runner sent, and a note for each one refused."""

    def __init__(self, staging: Staging, caps: ArtifactCaps) -> None:
        self._staging = staging
        self._caps = caps
        self._reader = TarReader()
        self._drafts: dict[str, Draft] = {}
        self._seen: set[str] = set()
        self._total = 0
        self._current: tuple[str, DraftWriter] | None = None
        self.notes: list[str] = []
        self.damaged = False

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the tar. Blocking: call it in a worker thread."""
        if self.damaged:
            return
        try:
            events = self._reader.feed(data)
        except TarDamaged as exc:
            self._damage(str(exc))
            return
        for event in events:
            if isinstance(event, Member):
                self._start(event)
            elif isinstance(event, Chunk):
                if self._current is not None:
                    self._current[1].write(event.data)
            elif isinstance(event, MemberEnd) and self._current is not None:
                name, writer = self._current
                self._current = None
                self._drafts[name] = writer.finish()

    def finish(self) -> None:
        """The tar is over: a member cut short is damage, and its draft goes."""
        if self.damaged:
            return
        try:
            self._reader.close()
        except TarDamaged as exc:
            self._damage(str(exc))

    def close(self) -> None:
        """Drop a draft cut short (a failure mid-member). Blocking: call it in a thread."""
        self._drop_current()

    def discard_all(self) -> None:
        """Drop every draft (the run keeps no files). Blocking: call it in a worker thread."""
        self._drop_current()
        for draft in self._drafts.values():
            self._staging.discard(draft)
        self._drafts.clear()

    def match(self, listing: Sequence[WorkspaceEntry]) -> list[OutputFile]:
        """The drafts listed as files with the same size and hash, in listing order; the
        others are discarded with a note. Blocking: call it in a worker thread."""
        self.finish()
        kept: list[OutputFile] = []
        for entry in listing:
            draft = self._drafts.pop(entry.path, None) if entry.kind == "file" else None
            if draft is None:
                continue
            if (draft.sha256, draft.size) != (entry.sha256, entry.size):
                self.notes.append(
                    f"{entry.path}: content does not match the reported hash; not kept"
                )
                self._staging.discard(draft)
                continue
            kept.append(OutputFile(path=entry.path, blob=draft))
        for name, draft in sorted(self._drafts.items()):
            self.notes.append(f"{name}: not listed as a file; not kept")
            self._staging.discard(draft)
        self._drafts.clear()
        return kept

    def _start(self, member: Member) -> None:
        refusal = self._refusal(member)
        self._seen.add(member.name)
        if refusal:
            self.notes.append(refusal)
            return
        self._total += member.size
        self._current = (member.name, self._staging.writer())

    def _refusal(self, member: Member) -> str | None:
        name, caps = member.name, self._caps
        if not member.regular:
            return f"{name!r}: not a regular file; not kept"
        try:
            if safe_relative_path(name) != name:
                return f"{name!r}: not a normalized path; not kept"
        except UnsafePath as exc:
            return f"{name!r}: {exc}; not kept"
        if name.startswith(RESERVED_PREFIX):
            return f"{name}: the {RESERVED_PREFIX} directory is reserved for Airlock; not kept"
        if name in self._seen:
            return f"{name}: sent twice; not kept"
        if len(self._drafts) + (self._current is not None) >= caps.max_files:
            return (
                f"{name}: over the limit of {caps.max_files} files "
                "([files] max_artifact_files); not kept"
            )
        if member.size > caps.max_file_bytes:
            return (
                f"{name}: {member.size} bytes is over the per-file limit of "
                f"{caps.max_file_bytes} ([files] max_artifact_file_bytes); not kept"
            )
        if self._total + member.size > caps.max_total_bytes:
            return (
                f"{name}: would exceed the total limit of {caps.max_total_bytes} bytes "
                "([files] max_artifact_total_bytes); not kept"
            )
        return None

    def _damage(self, reason: str) -> None:
        self.damaged = True
        self._drop_current()
        self.notes.append(
            f"output archive is damaged ({reason}); files after that point were not kept"
        )

    def _drop_current(self) -> None:
        if self._current is not None:
            self._current[1].discard()
            self._current = None

"""The languages run_code runs: one `Literal` shared by the tool's schema, the job spec
and the run record, so a language is never a bare string on the way."""

from __future__ import annotations

from typing import Literal

Language = Literal["python", "bash"]

RunKind = Literal["python", "bash", "browse"]
"""What a run record and a job spec name: a language of run_code, or a `browse` (the
browser box, whose driver takes no code)."""

"""The browser box of `browse` ([browser]): its limits, apart from run_code's, its kept
browsers, and what it does with a capability that carries a secret."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from .section import MIB, Section


class BrowserSettings(Section):
    """The browser box of `browse`: its own limits, apart from run_code's [limits]."""

    timeout_s: int = Field(default=30, gt=0)
    """Wall-clock seconds a browse gets when the call names none; 1..max_timeout_s."""

    max_timeout_s: int = Field(default=120, gt=0, le=600)
    """Largest timeout_s a browse may ask for, in seconds; at most 600."""

    memory_mb: int = Field(default=1024, ge=256, le=16384)
    """Memory of the browser container in MiB, no extra swap; Chromium needs 256 at least."""

    cpus: float = Field(default=1.0, ge=0.1, le=64)
    """CPU quota of the browser container in cores; 0.1..64."""

    pids: int = Field(default=256, ge=64, le=4096)
    """Most processes and threads alive at once in the browser container (Chromium runs
    several processes of dozens of threads each); 64..4096."""

    tmp_mb: int = Field(default=256, gt=0)
    """Size in MiB of the box's /tmp (the fresh profile) and of its home."""

    max_pages: int = Field(default=3, ge=1, le=20)
    """Most pages (tabs, popups) open in one browse; a page opened past it is closed."""

    max_bytes: int = Field(default=32 * MIB, gt=0)
    """Most bytes a browse keeps: screenshot, page text and downloads together."""

    width: int = Field(default=1280, ge=320, le=3840)
    """Viewport width in CSS pixels (the screenshot's width)."""

    height: int = Field(default=800, ge=240, le=2160)
    """Viewport height in CSS pixels (the screenshot's height)."""

    keep_idle_s: int = Field(default=300, gt=0, le=86_400)
    """Seconds a kept browser (`browse(keep=true)`) may sit unused before it is closed."""

    max_kept: int = Field(default=2, ge=0, le=50)
    """Most kept browsers open at once in one session; 0 turns keeping off."""

    max_kept_per_tenant: int = Field(default=8, ge=0, le=1000)
    """Most kept browsers open at once across a tenant's sessions, counted over every server
    sharing the records (a fleet's too)."""

    pool: int = Field(default=1, ge=0, le=16)
    """Started, never-used browser boxes kept ready (Chromium running, each with a CA of its
    own, so a one-shot browse skips the box's and Chromium's start); about 250 MB each while
    it waits. Missing means 1 where the browser image exists, 0 turns the pool off; at most
    16. Read from the server's policy only (a tenant's does not size the server's pool)."""

    secrets: Literal["refuse", "withhold"] = "refuse"
    """What `browse` does with a capability that has a secret. A browser box never carries
    one, whatever this says: a page can make its browser send any request to a granted host
    (a script's fetch, an image, a submitted form) and read the answer back, so a credential
    there would be the page's to use. "refuse" (missing means this) answers such a call with
    one sentence and starts no box; "withhold" lets the page reach the capability's hosts
    without the secret (the egress record says so)."""

    @model_validator(mode="after")
    def _timeout_within_max(self) -> BrowserSettings:
        if self.timeout_s > self.max_timeout_s:
            raise PydanticCustomError(
                "timeout_above_max",
                "[browser] timeout_s ({timeout_s}) is larger than max_timeout_s "
                "({max_timeout_s}); lower timeout_s or raise max_timeout_s",
                {"timeout_s": self.timeout_s, "max_timeout_s": self.max_timeout_s},
            )
        return self

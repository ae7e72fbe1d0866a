"""The engine's side of building Airlock's images: a layer built on a base from a prepared
context, with no network, every line of the build reported and a failure worded with its
last output; whether an image is there; and an engine that is not there or not answering
as `EngineUnavailable`.

Shared by the sandbox image (`image.py`), its Debian base (`debian_base.py`) and the browser
image (`browser_image.py`). Not here: what goes into any of them, or containers (the
backend's job). Progress goes through the caller's callback, never to stdout.
"""

from __future__ import annotations

import collections
import io
import re
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import requests

import airlock
from airlock.errors import EngineUnavailable, ImageUnavailable

from .build_stages import StageTracker, remove_stages

Progress = Callable[[str], None]

# Per-read timeout while streaming a build: a step may stay silent for a while.
_BUILD_READ_TIMEOUT_S = 600
# Where a base tree is bootstrapped (`debian_base.py`) and a build context written: debootstrap
# must create device nodes and run binaries in it, which a /tmp mounted nodev,noexec would
# refuse; /var/tmp is normally on disk.
SCRATCH_DIR = "/var/tmp"
# The last lines of a failed step's output that its error quotes.
TAIL_LINES = 20
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_START_DOCKER = "start the Docker engine (e.g. `sudo systemctl start docker` or `dockerd &`)"


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """Whether the engine has an image with this tag."""
    with engine_errors():
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
    return True


@contextmanager
def engine_errors() -> Iterator[None]:
    """Translate "the engine is not there or not answering" into `EngineUnavailable`."""
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise EngineUnavailable(
            f"the Docker engine is not usable ({exc}): {_START_DOCKER}, then retry"
        ) from exc


def build_layer(
    client: docker.DockerClient,
    progress: Progress,
    tag: str,
    base: str,
    members: list[tuple[str, bytes]],
    wheels: list[Path],
    *,
    nocache: bool,
    fix: str = "",
) -> None:
    """Build `tag` on `base` from a context of `members` (a Dockerfile among them) and
    `wheels` (under wheels/), with no network, reporting each line of the build; a failed
    build's error ends with `fix`."""
    progress(f"building {tag} on {base}")
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    stages = StageTracker()
    with engine_errors(), _build_context(members, wheels) as context:
        try:
            events = client.api.build(
                fileobj=context,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                nocache=nocache,
                decode=True,
                timeout=_BUILD_READ_TIMEOUT_S,
                labels={"airlock.version": airlock.__version__, "airlock.base": base},
                # The steps need no network (the wheels were fetched on the host); a build
                # that cannot reach out cannot fetch anything that is not in the recipe.
                network_mode="none",
                # Otherwise the SDK copies the host user's proxy settings into build args.
                use_config_proxy=False,
            )
            for event in events:
                # Without the colour codes some build steps print.
                text = _ANSI_ESCAPE.sub("", str(event.get("stream", "")))
                for line in text.splitlines():
                    if line.strip():
                        tail.append(line)
                        stages.feed(line)
                        progress(f"build: {line}")
                _raise_on_error(event, f"building {tag} on {base} failed", tail, fix)
        except docker.errors.APIError as exc:
            raise ImageUnavailable(f"building {tag} failed: {exc}") from exc
        finally:
            # Whether or not the build got through, its finished stages serve nothing.
            remove_stages(client, stages.stages, progress)
    if not image_exists(client, tag):
        raise ImageUnavailable(f"the build of {tag} ended without creating it")
    progress(f"built {tag}")


@contextmanager
def _build_context(members: list[tuple[str, bytes]], wheels: list[Path]) -> Iterator[IO[bytes]]:
    # On disk, not in memory: the wheels of the default lock are over 100 MB.
    with tempfile.TemporaryFile(dir=SCRATCH_DIR) as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            for name, data in members:
                # COPY keeps the mode from the context and makes the file root-owned: 0644
                # lets the sandbox user read the runner but not change it.
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
            for wheel in wheels:
                info = tar.gettarinfo(str(wheel), arcname=f"wheels/{wheel.name}")
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, "", ""
                with wheel.open("rb") as f:
                    tar.addfile(info, f)
        context.seek(0)
        yield context


def _raise_on_error(
    event: Mapping[str, Any], what: str, tail: Iterable[str], fix: str = ""
) -> None:
    if "error" not in event:
        return
    lines = "\n".join(f"  {line}" for line in tail)
    raise ImageUnavailable(
        f"{what}: {event['error']}"
        + (f"\nlast output:\n{lines}" if lines else "")
        + (f"\n{fix}" if fix else "")
    )

"""The stages of a multi-stage image build, read from the engine's build output, and their
removal once the image is tagged.

The classic builder keeps the result of every stage but the last as an untagged image
(the wheels stage of the sandbox image is over 1 GB), which nothing uses afterwards. The
build output names each step's image (` ---> 5c368fb1378d`); the one before a later `FROM`
step is the result of the stage that step ends. Removing an untagged image also removes its
untagged parents, the steps of that stage. Only images with no tag are ever removed, so a
base image named by a `FROM` (tagged) can never be.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import docker
import docker.errors
import requests

_FROM_STEP = re.compile(r"^Step \d+/\d+ : FROM ", re.IGNORECASE)
_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")


class StageTracker:
    """Fed the build's output lines; `stages` are the images earlier stages ended with."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self._last: str | None = None

    def feed(self, line: str) -> None:
        if _FROM_STEP.match(line):
            if self._last is not None:
                self.stages.append(self._last)
            self._last = None
        elif match := _STEP_IMAGE.match(line.rstrip()):
            self._last = match[1]


def remove_stages(
    client: docker.DockerClient, stages: list[str], progress: Callable[[str], None]
) -> None:
    """Remove the untagged stage images `stages`; a failure is reported, not raised: the
    image was built, and a leftover costs only disk."""
    for image_id in stages:
        try:
            if client.images.get(image_id).tags:
                continue
            client.images.remove(image_id)
        except docker.errors.NotFound:
            continue
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            progress(f"could not remove the build stage {image_id[:12]}: {exc}")

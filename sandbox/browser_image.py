"""Building the browser image: Debian's Chromium, fonts and NSS tools on an offline base of
their own (bootstrapped like the sandbox image's), plus Airlock's layer: the sandbox user and
the browser driver (`sandbox/inside/browser.py`, with the runner modules it shares).

Belongs here: the browser image's recipe and its content-derived tag. The bootstrapping and
the layer build are the sandbox image's (`sandbox/image.py`); nothing here starts containers
or prints (progress goes through the caller's callback).

Tags: base `airlock-browser-base:<suite>-<hash12>` over its Debian packages; image
`airlock-browser:<airlock version>-<hash12>` over (base tag, Dockerfile, the driver's files).
"""

from __future__ import annotations

import hashlib
import re
import time
from string import Template

import docker

import airlock
from airlock.errors import ImageUnavailable

from .debian_base import base_tag_of, bootstrap_base
from .image import IMAGE_LABEL, INSIDE_DIR, PYTHON
from .image_build import Progress, build_layer, image_exists
from .inside.wire import SANDBOX_HOME, SANDBOX_UID

# What the box needs and nothing more: no compiler, no shell tools beyond the base's.
BROWSER_PACKAGES = tuple(
    sorted(
        {
            "ca-certificates",
            "chromium",
            "fonts-dejavu-core",
            "fonts-liberation",
            "libnss3-tools",
            "python3",
        }
    )
)
# The driver shares the runner's machinery (the entrypoint's frame, privileges, relay,
# report), so those modules come along.
DRIVER_MODULES = (
    *("__init__.py", "wire.py", "codeproc.py", "runner.py"),
    *("entry.py", "privileges.py", "relay.py", "report.py"),
    *("browser.py", "browser_page.py", "browser_gate.py", "devtools.py"),
    *("browser_actions.py", "browser_snapshot.py"),
)
BROWSER_LABEL = "airlock.browser"

# Setuid bits are cleared as in the sandbox image (chromium's package brings none, the base
# brings su and friends). `compileall` makes a driver that does not compile fail the build,
# and leaves the bytecode a read-only root filesystem could not take at run time. The
# version check proves the browser starts in the image at all.
_DOCKERFILE = Template("""\
FROM $base
RUN groupadd -g $uid sandbox \\
 && useradd -u $uid -g $uid -d $home -M -s /bin/sh sandbox \\
 && mkdir -p /workspace $home /opt/airlock/inside \\
 && chown $uid:$uid /workspace \\
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY inside/ /opt/airlock/inside/
RUN $python -m compileall -q /opt/airlock \\
 && /usr/lib/chromium/chromium --version > /opt/airlock/chromium-version
LABEL $label=1 $browser_label=1
USER $uid:$uid
WORKDIR /workspace
ENV PATH=/usr/bin:/bin LANG=C.UTF-8
ENTRYPOINT ["$python", "-I", "-S", "/opt/airlock/inside/browser.py"]
""")


def browser_base_tag() -> str:
    return base_tag_of(BROWSER_PACKAGES, "airlock-browser-base")


def _members() -> list[tuple[str, bytes]]:
    dockerfile = _DOCKERFILE.substitute(
        base=browser_base_tag(),
        uid=SANDBOX_UID,
        home=SANDBOX_HOME,
        python=PYTHON,
        label=IMAGE_LABEL,
        browser_label=BROWSER_LABEL,
    )
    members = [("Dockerfile", dockerfile.encode())]
    for name in DRIVER_MODULES:
        path = INSIDE_DIR / name
        try:
            members.append((f"inside/{name}", path.read_bytes()))
        except OSError as exc:
            raise ImageUnavailable(
                f"cannot read {path} ({exc.strerror}): reinstall Airlock so that the "
                "browser image's driver is present"
            ) from exc
    return members


def browser_image_tag() -> str:
    """The browser image's tag; pure, touches no engine."""
    digest = hashlib.sha256()
    for name, data in _members():
        for part in (name.encode(), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    version = re.sub(r"[^A-Za-z0-9_.-]", "_", airlock.__version__)
    return f"airlock-browser:{version}-{digest.hexdigest()[:12]}"


def ensure_browser_image(
    client: docker.DockerClient, progress: Progress, *, force: bool = False
) -> str:
    """The browser image's tag, building its base and layer first if they are missing."""
    tag = browser_image_tag()
    if not force and image_exists(client, tag):
        return tag
    started = time.monotonic()
    progress("browser image, step 1/2: the Debian base with Chromium")
    bootstrap_base(client, progress, browser_base_tag(), BROWSER_PACKAGES, force=force)
    progress("browser image, step 2/2: the browser layer (driver)")
    build_layer(client, progress, tag, browser_base_tag(), _members(), [], nocache=force)
    progress(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag

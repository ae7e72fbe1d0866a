"""Building the sandbox image: a Debian base with the tools agents reach for, plus Airlock's
layer (the Python packages of a hash-pinned lock file, the user, the runner, the pip and npm
wrappers, the module that reads editable installs, the warmed home, the manifest).

Belongs here: the image recipe (what the image holds, its Dockerfile and build context), the
tag derived from it, what agents are told it offers, the choice of base ([image] base pulled,
or the offline one), and the three steps of a build. Not here: bootstrapping the offline base
(`sandbox/debian_base.py`); the engine's side of a build, whether an image exists and the
engine's errors (`sandbox/image_build.py`); starting or hardening containers (the backend's
job); the code that runs inside (`sandbox/inside/`, copied in byte for byte); reading lock
files and fetching wheels (`sandbox/pylock.py`); and printing: every step is reported through
the caller's `progress` callback, never to stdout, which may be an MCP stdio transport.

Tags are derived from content, so a changed recipe, runner or lock is picked up without a
version bump, and an unchanged one reuses the image:

- offline base: `airlock-base:<suite>-<hash12>`, hash over the debootstrap recipe (which
  includes the Debian packages); or, with [image] base, that reference, pulled if absent
  (`sandbox/registry.py`) and never bootstrapped;
- sandbox: `airlock-sandbox:<airlock version>-<hash12>`, hash over (base reference,
  Dockerfile, every file of the build context but the wheels, and the lock, which pins the
  wheels). Its `airlock.inside` label is the hash of the in-container code alone, which a
  server checks before running an image it did not build (`sandbox/image_source.py`).

Dependencies resolve here, outside the boundary: pip on the build host downloads exactly the
wheels the lock pins and checks their hashes; the layer installs them with no network.
Everything here is synchronous and slow (the first offline build takes minutes); async
callers run it in a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

import docker

import airlock
from airlock.errors import ImageUnavailable
from airlock.policies import ImageSettings
from airlock.policies.references import parse_reference

from .debian_base import base_tag_of, bootstrap_base
from .image_build import Progress, build_layer, engine_errors, image_exists
from .inside.wire import HOME_TEMPLATE, SANDBOX_HOME, SANDBOX_UID
from .pylock import IMAGE_PYTHON_VERSION, PythonLock, default_lock, fetch_wheels, read_lock
from .registry import pull

# The code that runs inside (sandbox/inside): named here only as files to copy, never imported.
INSIDE_DIR: Path = Path(__file__).with_name("inside")
RUNNER_PATH: Path = INSIDE_DIR / "runner.py"
# Copied into the image as the package `inside`, with the runner.
INSIDE_MODULES = (
    *("__init__.py", "wire.py", "codeproc.py", "boot.py", "prestart.py"),
    *("entry.py", "privileges.py", "relay.py", "report.py"),
)
INVENTORY_PATH: Path = INSIDE_DIR / "inventory.py"
EDITABLE_SITE_PATH: Path = INSIDE_DIR / "editable_site.py"
FILES_DIR: Path = Path(__file__).with_name("files")
MANIFEST_PATH = "/opt/airlock/manifest.json"
# Preloaded into every dynamically linked program of the image through /etc/ld.so.preload:
# see files/statx-shim.c for the gVisor releases whose statx it works around.
STATX_SHIM_PATH = "/usr/local/lib/airlock/statx.so"

# What every sandbox offers besides Python's packages: the command-line tools agents reach for
# first, a C compiler, Node.js with npm, and Python with pip and venv. All from Debian, so
# nothing is fetched at run time.
DEBIAN_PACKAGES = (
    *("bash", "coreutils", "ca-certificates", "procps", "less", "tar", "xz-utils", "bzip2"),
    *("git", "curl", "wget", "jq", "unzip", "zip", "patch", "file", "sqlite3"),
    *("gcc", "libc6-dev", "make"),
    *("nodejs", "npm"),
    *("python3", "python3-pip", "python3-venv"),
)
# The CLI tools the run_code description names (their versions are in the manifest).
CLI_TOOLS = (
    *("git", "curl", "wget", "jq", "unzip", "zip", "patch", "file", "sqlite3"),
    *("gcc", "make", "node", "npm"),
)

PYTHON = "/usr/bin/python3"
# Where the lock's packages are installed (pip's prefix is /usr/local on Debian).
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
IMAGE_LABEL = "airlock.image"
# The hash of the in-container code (`inside_digest`): a server runs only an image whose
# runner is its own, whoever built it (`sandbox/image_source.py` checks).
INSIDE_LABEL = "airlock.inside"

# Two stages, so the wheels never become a layer of the image: the first installs them into a
# staging root, the second copies only what was installed. The install runs with no network
# (the build has none) from the wheels fetched and hash-checked on the host, and pip checks the
# hashes again (--require-hashes), refuses anything but a wheel, and fails on a dependency the
# lock does not pin. --ignore-installed: Debian's own modules must not stand in for a pin.
# Setuid bits are cleared because the base brings su, mount, passwd and friends (apt depends
# on adduser, which depends on passwd): the backend's no-new-privileges makes them inert, but
# an image that has none stays safe under a runtime or backend that forgets that option.
# The files under /etc and the pip and npm wrappers make pip and npm refuse at once (packages
# come from the lock, at build time; only `pip install -e` of a project in /workspace works,
# offline) and give git an author; matplotlib gets the headless Agg backend in its own rc
# file, since the sandbox environment is fixed, and its font list is built here, into the
# template prestart.py copies into every sandbox's home (building it takes seconds).
# airlock_editable_site (inside/editable_site.py) and its .pth put a session's editable
# installs on every Python's path without running anything of theirs.
# The entrypoint (boot.py), the runner, prestart.py and the modules they share form the
# package `inside` under /opt/airlock, so their relative imports work there as on the host.
# `compileall` makes a runner that does not compile under the image's Python fail the build,
# not every container; it also leaves the bytecode the runner is imported from, which it
# could not write at run time on the read-only root filesystem.
# A third stage compiles the statx shim (files/statx-shim.c), so only the library, not its
# source, reaches the image; /etc/ld.so.preload loads it into every dynamically linked program,
# and grepping the maps of a process started after that proves the preload works (a preload
# that fails to load is only a warning to ld.so, and the fix would be silently gone).
# Exec-form ENTRYPOINT does no variable expansion, hence a template filled in here, not ARG.
# The runner needs no site-packages (-S): under gVisor `site` costs about 17 ms a container.
# A base named by [image] base was built elsewhere: the first step checks that it holds the
# Debian packages the recipe relies on, so a wrong base fails at once and by name.
_DOCKERFILE = Template("""\
FROM $base AS wheels
${base_check}COPY wheels /wheels
RUN $python -m pip install --no-index --find-links=/wheels --require-hashes \\
      --only-binary=:all: --ignore-installed --break-system-packages --root=/staging \\
      --no-cache-dir --no-warn-script-location --disable-pip-version-check \\
      --root-user-action=ignore --requirement=/wheels/python.lock

FROM $base AS shim
COPY files/statx-shim.c /src/statx-shim.c
RUN gcc -O2 -Wall -Wextra -Werror -shared -fPIC -s -Wl,-z,relro,-z,now \\
      -o /statx.so /src/statx-shim.c

FROM $base
COPY --from=wheels /staging/usr/local /usr/local
RUN groupadd -g $uid sandbox \\
 && useradd -u $uid -g $uid -d $home -M -s /bin/bash sandbox \\
 && mkdir -p /workspace $home /opt/airlock/inside \\
 && chown $uid:$uid /workspace \\
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY files/pip.conf files/gitconfig files/npmrc /etc/
COPY files/EXTERNALLY-MANAGED /usr/lib/python3.11/EXTERNALLY-MANAGED
COPY files/pip files/npm /usr/local/bin/
COPY editable_site.py $site/airlock_editable_site.py
COPY files/airlock_editable_site.pth $site/
COPY inside/ /opt/airlock/inside/
COPY inventory.py /opt/airlock/
COPY --from=shim /statx.so $shim
RUN echo $shim > /etc/ld.so.preload \\
 && grep -q $shim /proc/self/maps \\
 && chmod 755 /usr/local/bin/pip /usr/local/bin/npm \\
 && ln -s pip /usr/local/bin/pip3 && ln -s pip /usr/local/bin/pip3.11 \\
 && for rc in $site/matplotlib/mpl-data/matplotlibrc; do \\
      [ ! -f "$$rc" ] || echo 'backend: Agg' >> "$$rc"; done \\
 && if $python -c 'import matplotlib' 2>/dev/null; then \\
      MPLCONFIGDIR=$template/.cache/matplotlib $python -c 'import matplotlib.font_manager'; fi \\
 && $python -m compileall -q /opt/airlock $site/airlock_editable_site.py \\
 && $python -I /opt/airlock/inventory.py > $manifest
LABEL $label=1 $inside_label=$inside
USER $uid:$uid
WORKDIR /workspace
ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
ENTRYPOINT ["$python", "-I", "-S", "/opt/airlock/inside/boot.py"]
""")
_CONTEXT_FILES = (
    *("pip.conf", "gitconfig", "npmrc", "EXTERNALLY-MANAGED", "pip", "npm"),
    "airlock_editable_site.pth",
    "statx-shim.c",
)


@dataclass(frozen=True)
class ImageInputs:
    """What the operator chooses to put into the image: the Python lock (the default one
    unless the policy names another) and Debian packages beyond `DEBIAN_PACKAGES`."""

    python_lock: PythonLock = field(default_factory=default_lock)
    debian_packages: tuple[str, ...] = ()
    base: str | None = None
    """An image reference to build on ([image] base); None: the debootstrapped base."""

    @property
    def all_debian_packages(self) -> tuple[str, ...]:
        return tuple(sorted({*DEBIAN_PACKAGES, *self.debian_packages}))


@dataclass(frozen=True)
class _Recipe:
    """Everything that determines the sandbox image, and the tag derived from it."""

    base: str
    dockerfile: str
    files: tuple[tuple[str, bytes], ...]
    """Build context files besides the wheels: (name in the context, bytes)."""
    python_lock: PythonLock
    fix: str = ""
    """What to do when the build fails on a base named by [image] base."""

    @property
    def tag(self) -> str:
        parts = [
            ("base", self.base.encode()),
            ("dockerfile", self.dockerfile.encode()),
            ("lock", self.python_lock.text.encode()),
            *self.files,
        ]
        # Docker tags allow only [A-Za-z0-9_.-]; a local version such as 0.1.0+g1234 has a "+".
        version = re.sub(r"[^A-Za-z0-9_.-]", "_", airlock.__version__)
        return f"airlock-sandbox:{version}-{_digest(parts)[:12]}"


def _digest(parts: Iterable[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in parts:
        for part in (name.encode(), data):
            # Length-prefixed, so moving bytes between parts changes the hash.
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def image_inputs(settings: ImageSettings) -> ImageInputs:
    """What a policy's [image] section puts into the image; reads its lock file."""
    lock = default_lock() if settings.python_lock is None else read_lock(Path(settings.python_lock))
    return ImageInputs(
        python_lock=lock, debian_packages=settings.debian_packages, base=settings.base
    )


def describe_toolbox(inputs: ImageInputs) -> str:
    """What the image offers, for the agent: written into run_code's description, so that
    it need not probe. Built from the recipe, so it is known before the image exists. Only
    the packages the lock was asked for are named (the rest are what those depend on)."""
    lock = inputs.python_lock
    named = lock.requested or lock.entries
    packages = ", ".join(entry.pin.replace("==", " ") for entry in named)
    if len(named) < len(lock.entries):
        packages += f" (and {len(lock.entries) - len(named)} packages these depend on)"
    extra = ""
    if inputs.debian_packages:
        extra = f", plus the Debian packages {', '.join(inputs.debian_packages)}"
    return (
        f"The sandbox has Python {IMAGE_PYTHON_VERSION[:4]} with these packages: {packages}. "
        f"Command-line tools: {', '.join(CLI_TOOLS)}{extra}. matplotlib draws headless "
        "(save figures to files; PNG, JPEG, GIF and WebP files come back as images). "
        "Nothing can be installed from an index at run time (pip and npm refuse at once): "
        "dependencies come from the operator's lock file. `pip install -e DIR` of a project "
        "in /workspace works offline (no dependencies installed) and lasts for the session. "
        f"HOME ({SANDBOX_HOME}) is new in every run. The full list with versions is in "
        f"{MANIFEST_PATH}."
    )


def offline_base_tag(inputs: ImageInputs | None = None) -> str:
    """The tag of the debootstrapped base; changes whenever the bootstrap recipe does."""
    return base_tag_of((inputs or ImageInputs()).all_debian_packages)


def base_reference(inputs: ImageInputs | None = None) -> str:
    """What the layer is built on: [image] base (by digest when it has one), else the
    debootstrapped base."""
    inputs = inputs or ImageInputs()
    if inputs.base is None:
        return offline_base_tag(inputs)
    return parse_reference(inputs.base).pinned


def inside_digest(runner: Path = RUNNER_PATH) -> str:
    """The sha256 over the in-container code the image carries (the files of sandbox/inside,
    by name): the value of its `airlock.inside` label, which a server's own must equal."""
    return _digest(_inside_files(runner))


def image_tag(inputs: ImageInputs | None = None, runner: Path = RUNNER_PATH) -> str:
    """The sandbox image tag for these inputs and runner; pure, touches no engine."""
    return _recipe(inputs or ImageInputs(), runner).tag


def base_exists(client: docker.DockerClient, inputs: ImageInputs | None = None) -> bool:
    """Whether the base for these inputs is in the engine already (built or pulled)."""
    return image_exists(client, base_reference(inputs))


def ensure_image(
    client: docker.DockerClient,
    progress: Progress,
    inputs: ImageInputs | None = None,
    runner: Path = RUNNER_PATH,
) -> str:
    """Return the sandbox image tag, building base and layer only if missing."""
    tag = image_tag(inputs, runner)
    if image_exists(client, tag):
        return tag
    return build_image(client, progress, inputs, runner=runner)


def build_image(
    client: docker.DockerClient,
    progress: Progress,
    inputs: ImageInputs | None = None,
    *,
    force: bool = False,
    runner: Path = RUNNER_PATH,
) -> str:
    """Build the sandbox image and return its tag.

    Without `force` an image already present under the tag is kept. With `force` the base is
    bootstrapped again too, and the layer is built without cache.
    """
    inputs = inputs or ImageInputs()
    recipe = _recipe(inputs, runner)
    if not force and image_exists(client, recipe.tag):
        progress(f"{recipe.tag} is already built")
        return recipe.tag
    started = time.monotonic()
    progress("step 1/3: the Debian base")
    ensure_base(client, progress, inputs, force=force)
    progress(f"step 2/3: the Python packages pinned by {inputs.python_lock.source}")
    wheels = fetch_wheels(inputs.python_lock, wheel_cache_dir(), progress)
    progress(f"step 3/3: the sandbox layer ({len(wheels)} wheels, runner, manifest)")
    members = [
        ("Dockerfile", recipe.dockerfile.encode()),
        *recipe.files,
        ("wheels/python.lock", recipe.python_lock.text.encode()),
    ]
    build_layer(
        client, progress, recipe.tag, recipe.base, members, wheels, nocache=force, fix=recipe.fix
    )
    with engine_errors():
        size = client.images.get(recipe.tag).attrs["Size"]
    progress(f"built {recipe.tag}: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")
    return recipe.tag


def wheel_cache_dir() -> Path:
    """Where fetched wheels are kept between builds: the user's cache, never the repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airlock" / "wheels"


def _recipe(inputs: ImageInputs, runner: Path) -> _Recipe:
    inside = _inside_files(runner)
    files = [*inside, *_read_files((f"files/{name}", FILES_DIR / name) for name in _CONTEXT_FILES)]
    base = base_reference(inputs)
    base_check = ""
    if inputs.base is not None:
        base_check = (
            f"RUN for p in {' '.join(inputs.all_debian_packages)}; do "
            """[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] """
            '|| { echo "the base lacks the Debian package $p" >&2; exit 1; }; done\n'
        )
    dockerfile = _DOCKERFILE.substitute(
        base=base,
        base_check=base_check,
        python=PYTHON,
        uid=SANDBOX_UID,
        home=SANDBOX_HOME,
        template=HOME_TEMPLATE,
        site=SITE_PACKAGES,
        label=IMAGE_LABEL,
        inside_label=INSIDE_LABEL,
        inside=_digest(inside),
        manifest=MANIFEST_PATH,
        shim=STATX_SHIM_PATH,
    )
    fix = ""
    if inputs.base is not None:
        fix = (
            f"The base {base} comes from [image] base: name an Airlock base with these Debian "
            "packages, which `airlock image push --base REGISTRY` publishes (under a policy "
            "with the same [image] debian_packages), or remove base to bootstrap one here."
        )
    return _Recipe(
        base=base,
        dockerfile=dockerfile,
        files=tuple(files),
        python_lock=inputs.python_lock,
        fix=fix,
    )


def _inside_files(runner: Path) -> list[tuple[str, bytes]]:
    """The in-container code, as (name in the build context, bytes)."""
    return _read_files(
        (
            *((f"inside/{name}", INSIDE_DIR / name) for name in INSIDE_MODULES),
            ("inside/runner.py", runner),
            ("inventory.py", INVENTORY_PATH),
            ("editable_site.py", EDITABLE_SITE_PATH),
        )
    )


def _read_files(named: Iterable[tuple[str, Path]]) -> list[tuple[str, bytes]]:
    files = []
    for name, path in named:
        try:
            files.append((name, path.read_bytes()))
        except OSError as exc:
            raise ImageUnavailable(
                f"cannot read {path} ({exc.strerror}): reinstall Airlock so that the "
                f"sandbox image's {name} is present (the runner and its files ship with it)"
            ) from exc
    return files


# --- the base -----------------------------------------------------------------------------


def ensure_base(
    client: docker.DockerClient,
    progress: Progress,
    inputs: ImageInputs | None = None,
    *,
    force: bool = False,
) -> str:
    """Make sure the base these inputs build on is in the engine: pull [image] base, or
    bootstrap one; return its reference. `force` pulls or bootstraps it again."""
    inputs = inputs or ImageInputs()
    reference = base_reference(inputs)
    if inputs.base is None:
        _ensure_offline_base(client, progress, inputs, force=force)
    elif force or not image_exists(client, reference):
        with engine_errors():
            pull(client, parse_reference(reference), progress)
    else:
        progress(f"using base {reference} ([image] base)")
    return reference


def _ensure_offline_base(
    client: docker.DockerClient, progress: Progress, inputs: ImageInputs, *, force: bool
) -> None:
    bootstrap_base(
        client, progress, offline_base_tag(inputs), inputs.all_debian_packages, force=force
    )

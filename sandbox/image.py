"""Building the sandbox image: a Debian base with the tools agents reach for, plus Airlock's
layer (the Python packages of a hash-pinned lock file, the user, the runner, the pip and npm
wrappers, the module that reads editable installs, the warmed home, the manifest).

Belongs here: the image recipe, the tag derived from it, the offline base bootstrapped with
`debootstrap` and imported into Docker, and turning engine and build failures into
`EngineUnavailable` / `ImageUnavailable`; the bootstrapping (`bootstrap_base`) and the
offline layer build (`build_layer`) serve the browser image too (`browser_image.py`).
Not here: starting or hardening containers (the backend's job), the code that runs inside
(`sandbox/inside/`, copied in byte for byte), reading lock files and fetching wheels
(`sandbox/pylock.py`), and printing: every step is reported through the caller's `progress`
callback, never to stdout, which may be an MCP stdio transport.

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

import collections
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import IO, Any

import docker
import docker.errors
import requests

import airlock
from airlock.errors import EngineUnavailable, ImageUnavailable
from airlock.policies import ImageSettings
from airlock.policies.references import parse_reference

from .build_stages import StageTracker, remove_stages
from .inside.wire import HOME_TEMPLATE, SANDBOX_HOME, SANDBOX_UID
from .pylock import IMAGE_PYTHON_VERSION, PythonLock, default_lock, fetch_wheels, read_lock
from .registry import pull
from .streaming import run_streaming

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

Progress = Callable[[str], None]

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
_DEBOOTSTRAP_VARIANT = "minbase"
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
# Pruned from the bootstrapped tree before import. Nothing in a sandbox runs apt (no network,
# no root), so the package lists and downloaded .debs are dead weight; nobody reads man pages
# there, and with LANG=C.UTF-8 no program looks up translated messages. Dropping them takes
# about 40 MB off an image that every container is created from.
# The copyright files under usr/share/doc stay: the licences ask for them to travel with the
# binaries (Debian's own slim images keep them for the same reason).
_PRUNED = (
    "var/cache/apt/archives/*.deb",
    "var/lib/apt/lists/*",
    "usr/share/man/*",
    "usr/share/locale/*/",
    "usr/share/doc/*/* except copyright",
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
# Per-read timeout while streaming a build: a step may stay silent for a while.
_BUILD_READ_TIMEOUT_S = 600
# Where the base tree is bootstrapped: debootstrap must create device nodes and run binaries
# in it, which a /tmp mounted nodev,noexec would refuse; /var/tmp is normally on disk.
_SCRATCH_DIR = "/var/tmp"
_TAIL_LINES = 20
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "no_proxy"})
_START_DOCKER = "start the Docker engine (e.g. `sudo systemctl start docker` or `dockerd &`)"
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


def base_tag_of(packages: tuple[str, ...], repository: str = "airlock-base") -> str:
    """The tag of a debootstrapped base holding `packages` (the browser image has its own)."""
    recipe = "\n".join(
        (DEBIAN_SUITE, _DEBOOTSTRAP_VARIANT, "apt-get --no-install-recommends", *packages, *_PRUNED)
    )
    return f"{repository}:{DEBIAN_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


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


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """Whether the engine has an image with this tag."""
    with engine_errors():
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
    return True


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


@contextmanager
def engine_errors() -> Iterator[None]:
    """Translate "the engine is not there or not answering" into `EngineUnavailable`."""
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise EngineUnavailable(
            f"the Docker engine is not usable ({exc}): {_START_DOCKER}, then retry"
        ) from exc


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


def bootstrap_base(
    client: docker.DockerClient,
    progress: Progress,
    tag: str,
    packages: tuple[str, ...],
    *,
    force: bool,
) -> None:
    """Bootstrap Debian with `packages` and import it as `tag`, unless it exists already."""
    if not force and image_exists(client, tag):
        progress(f"using base {tag}")
        return
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageUnavailable(
            "building the offline base image needs debootstrap, which is not installed: "
            "apt-get install debootstrap"
        )
    if os.geteuid() != 0:
        raise ImageUnavailable(
            "building the offline base image needs root (debootstrap creates device nodes "
            "and runs package scripts in a chroot): run the image build as root, e.g. with sudo"
        )
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="airlock-base-", dir=_SCRATCH_DIR)).resolve()
    try:
        _debootstrap(debootstrap, root, progress)
        _install_packages(root, packages, progress)
        _prune(root)
        _import_tree(client, root, tag, progress)
    finally:
        _remove_tree(root, progress)
    with engine_errors():
        size = client.images.get(tag).attrs["Size"]
    progress(f"base {tag} ready: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")


def _debootstrap(debootstrap: str, root: Path, progress: Progress) -> None:
    progress(f"bootstrapping Debian {DEBIAN_SUITE} ({_DEBOOTSTRAP_VARIANT}) from {DEBIAN_MIRROR}")
    argv = [
        debootstrap,
        f"--variant={_DEBOOTSTRAP_VARIANT}",
        DEBIAN_SUITE,
        str(root),
        DEBIAN_MIRROR,
    ]
    status, tail = _stream(argv, "debootstrap", progress)
    if status != 0:
        log = root / "debootstrap" / "debootstrap.log"
        log_tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
        raise ImageUnavailable(
            f"debootstrap failed with exit status {status}; last output:\n"
            + "\n".join(f"  {line}" for line in [*tail, *log_tail])
            + f"\nCheck that {DEBIAN_MIRROR} is reachable from this machine (debootstrap "
            "downloads the packages from it), then run the image build again."
        )


def _install_packages(root: Path, packages: tuple[str, ...], progress: Progress) -> None:
    """apt-get inside the bootstrapped tree: unlike debootstrap's own resolver, apt handles
    virtual packages and alternatives (npm's dependencies need both)."""
    progress(f"installing {len(packages)} Debian packages and their dependencies with apt-get")
    # The build host's proxy settings reach the mirror the way debootstrap reached it.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    env |= {k: v for k, v in os.environ.items() if k.lower() in _PROXY_VARIABLES}
    env["DEBIAN_FRONTEND"] = "noninteractive"
    for step in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ["apt-get", "clean"],
    ):
        status, tail = _stream(["chroot", str(root), *step], "apt-get", progress, env=env)
        if status != 0:
            raise ImageUnavailable(
                f"`{' '.join(step[:2])}` in the bootstrapped tree failed with exit status "
                f"{status}; last output:\n"
                + "\n".join(f"  {line}" for line in tail)
                + f"\nCheck the names in [image] debian_packages (they must exist in Debian "
                f"{DEBIAN_SUITE}) and that {DEBIAN_MIRROR} is reachable, then build again."
            )


def _stream(
    argv: list[str], label: str, progress: Progress, env: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    """Run `argv`, reporting each line of its output; its exit status and last lines."""
    return run_streaming(
        argv, lambda line: progress(f"{label}: {line}"), env=env, tail_lines=_TAIL_LINES
    )


def _prune(root: Path) -> None:
    """Delete what `_PRUNED` names, keeping the copyright files under usr/share/doc."""

    def is_deb(entry: os.DirEntry[str]) -> bool:
        return entry.name.endswith(".deb")

    def is_copyright(entry: os.DirEntry[str]) -> bool:
        return entry.name == "copyright"

    def anything(entry: os.DirEntry[str]) -> bool:
        return True

    def is_real_dir(entry: os.DirEntry[str]) -> bool:
        return entry.is_dir(follow_symlinks=False)

    _delete_entries(root / "var/cache/apt/archives", is_deb)
    _delete_entries(root / "var/lib/apt/lists", anything)
    _delete_entries(root / "usr/share/man", anything)
    # Only the per-language catalog directories; files directly in it (locale.alias, where
    # installed) are read by setlocale().
    _delete_entries(root / "usr/share/locale", is_real_dir)
    doc = root / "usr/share/doc"
    if _is_real_dir(doc):
        for package in os.scandir(doc):
            if package.is_dir(follow_symlinks=False):
                _delete_entries(Path(package.path), lambda entry: not is_copyright(entry))


def _delete_entries(directory: Path, doomed: Callable[[os.DirEntry[str]], bool]) -> None:
    # Never follows a symlink: we run as root, and a link in the tree that points at an
    # absolute path would point into the host.
    if not _is_real_dir(directory):
        return
    for entry in os.scandir(directory):
        if not doomed(entry):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _is_real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _import_tree(client: docker.DockerClient, root: Path, tag: str, progress: Progress) -> None:
    progress(f"importing the bootstrapped tree as {tag}")
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-c", "."],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None and tar.stderr is not None

    def chunks(stream: IO[bytes]) -> Iterator[bytes]:
        while chunk := stream.read(1 << 20):
            yield chunk

    repository, _, version = tag.partition(":")
    try:
        with engine_errors():
            try:
                # A generator is sent chunked, so the tree is never held in memory or on disk.
                reply = client.api.import_image_from_stream(
                    chunks(tar.stdout), repository=repository, tag=version
                )
            except docker.errors.APIError as exc:
                raise ImageUnavailable(f"docker import of the base failed: {exc}") from exc
    finally:
        tar.stdout.close()
        tar_errors = tar.stderr.read().decode(errors="replace")
        tar.stderr.close()
        tar.wait()
    if tar.returncode != 0:
        raise ImageUnavailable(f"archiving {root} failed: {tar_errors.strip()}")
    if not image_exists(client, tag):
        raise ImageUnavailable(f"docker import did not create {tag}; the engine said: {reply}")


def _remove_tree(root: Path, progress: Progress) -> None:
    # debootstrap mounts /proc, /sys and host device nodes inside the tree; if it was killed
    # before unmounting them, deleting the tree would reach into those. Unmount first, and
    # keep the tree when that fails.
    for point in _mount_points_under(root):
        subprocess.run(["umount", point], capture_output=True, check=False)
    if still := _mount_points_under(root):
        progress(f"left {root} in place: still mounted at {', '.join(still)}; unmount, then delete")
        return
    try:
        shutil.rmtree(root)
    except OSError as exc:
        progress(f"could not delete {root} ({exc}); delete it by hand")


def _mount_points_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first."""
    prefix = str(root)
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as mountinfo:
        for line in mountinfo:
            # Field 5 is the mount point, with space, tab, newline and backslash as octal escapes.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


# --- the layer -------------------------------------------------------------------------


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
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
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
    with tempfile.TemporaryFile(dir=_SCRATCH_DIR) as context:
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

"""Building the sandbox image: a Debian base plus Airlock's layer (user, runner, entrypoint).

Belongs here: the image recipe, the tag derived from it, the offline base bootstrapped with
`debootstrap` and imported into Docker, and turning engine and build failures into
`EngineUnavailable` / `ImageUnavailable`. Not here: starting or hardening containers (the
backend's job), the runner itself (`sandbox/runner.py`, copied in byte for byte), and printing:
every step is reported through the caller's `progress` callback, never to stdout, which may be
an MCP stdio transport.

Tags are derived from content, so a changed recipe or runner is picked up without a version
bump:

- offline base: `airlock-base:<suite>-<hash12>`, hash over the debootstrap recipe;
- sandbox: `airlock-sandbox:<airlock version>-<hash12>`, hash over (base tag, Dockerfile,
  runner bytes).

Everything here is synchronous and slow (the first offline build takes about a minute); async
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
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import IO, Any, Literal

import docker
import docker.errors
import requests

import airlock
from airlock.errors import EngineUnavailable, ImageUnavailable

RUNNER_PATH: Path = Path(__file__).with_name("runner.py")

Progress = Callable[[str], None]
BaseKind = Literal["offline", "registry"]

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
_DEBOOTSTRAP_VARIANT = "minbase"
_DEBOOTSTRAP_INCLUDE = (
    "python3",
    "bash",
    "coreutils",
    "ca-certificates",
    "curl",
    # The HTTP clients agents reach for first; from Debian, so no network at run time.
    "python3-requests",
    "python3-httpx",
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

REGISTRY_BASE = "python:3.11-slim"
# The official python images install their interpreter under /usr/local; Debian's is in /usr.
_PYTHON = {"offline": "/usr/bin/python3", "registry": "/usr/local/bin/python3"}

SANDBOX_UID = 1000
IMAGE_LABEL = "airlock.image"

# Setuid bits are cleared because the base brings su, mount, passwd and friends (apt depends
# on adduser, which depends on passwd): the backend's no-new-privileges makes them inert, but
# an image that has none stays safe under a runtime or backend that forgets that option.
# `compileall` makes a runner that does not compile under the image's Python fail the build,
# not every container; it also leaves bytecode for anything the runner imports from
# /opt/airlock, which it could not write at run time on the read-only root filesystem.
# Exec-form ENTRYPOINT does no variable expansion, hence a template filled in here, not ARG.
_DOCKERFILE = Template("""\
FROM $base
RUN groupadd -g $uid sandbox \\
 && useradd -u $uid -g $uid -d /workspace -M -s /bin/bash sandbox \\
 && mkdir -p /workspace /opt/airlock \\
 && chown $uid:$uid /workspace \\
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY runner.py /opt/airlock/runner.py
RUN $python -m compileall -q /opt/airlock
LABEL $label=1
USER $uid:$uid
WORKDIR /workspace
ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
ENTRYPOINT ["$python", "-I", "/opt/airlock/runner.py"]
""")

# Per-read timeout while streaming a build: a step may stay silent for a while.
_BUILD_READ_TIMEOUT_S = 600
# Where the base tree is bootstrapped: debootstrap must create device nodes and run binaries
# in it, which a /tmp mounted nodev,noexec would refuse; /var/tmp is normally on disk.
_SCRATCH_DIR = "/var/tmp"
_TAIL_LINES = 20
_START_DOCKER = "start the Docker engine (e.g. `sudo systemctl start docker` or `dockerd &`)"


@dataclass(frozen=True)
class _Recipe:
    """Everything that determines the sandbox image, and the tag derived from it."""

    base: str
    dockerfile: str
    runner: bytes

    @property
    def tag(self) -> str:
        digest = hashlib.sha256()
        for part in (self.base.encode(), self.dockerfile.encode(), self.runner):
            # Length-prefixed, so moving bytes between parts changes the hash.
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        # Docker tags allow only [A-Za-z0-9_.-]; a local version such as 0.1.0+g1234 has a "+".
        version = re.sub(r"[^A-Za-z0-9_.-]", "_", airlock.__version__)
        return f"airlock-sandbox:{version}-{digest.hexdigest()[:12]}"


def offline_base_tag() -> str:
    """The tag of the debootstrapped base; changes whenever the bootstrap recipe does."""
    recipe = "\n".join(
        (DEBIAN_SUITE, _DEBOOTSTRAP_VARIANT, ",".join(_DEBOOTSTRAP_INCLUDE), *_PRUNED)
    )
    return f"airlock-base:{DEBIAN_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def image_tag(runner: Path = RUNNER_PATH, base: BaseKind = "offline") -> str:
    """The sandbox image tag for this runner and base; pure, touches no engine."""
    return _recipe(runner, base).tag


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    """Whether the engine has an image with this tag."""
    with _engine_errors():
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
    return True


def missing_policy_image(tag: str) -> str:
    """Why a run cannot start when the image the policy names is absent, and the fixes."""
    return (
        f"the sandbox image {tag}, named by [sandbox] image in the policy, is not in the "
        f"Docker engine: pull it (`docker pull {tag}`), build it under that name, or correct "
        "the name in the policy (remove it to use the image Airlock builds itself)"
    )


def ensure_image(
    client: docker.DockerClient, progress: Progress, runner: Path = RUNNER_PATH
) -> str:
    """Return the offline sandbox image tag, building base and layer only if missing."""
    tag = image_tag(runner)
    if image_exists(client, tag):
        return tag
    return build_image(client, progress, runner=runner)


def build_image(
    client: docker.DockerClient,
    progress: Progress,
    *,
    force: bool = False,
    runner: Path = RUNNER_PATH,
    base: BaseKind = "offline",
) -> str:
    """Build the sandbox image and return its tag.

    Without `force` an image already present under the tag is kept. With `force` the base is
    rebuilt too (bootstrapped again, or pulled again), and the layer is built without cache.
    """
    recipe = _recipe(runner, base)
    if not force and image_exists(client, recipe.tag):
        progress(f"{recipe.tag} is already built")
        return recipe.tag
    if base == "offline":
        _ensure_offline_base(client, progress, force=force)
    else:
        _ensure_registry_base(client, progress, force=force)
    _build_layer(client, progress, recipe, nocache=force)
    return recipe.tag


def _recipe(runner: Path, base: BaseKind) -> _Recipe:
    try:
        runner_bytes = runner.read_bytes()
    except OSError as exc:
        raise ImageUnavailable(
            f"cannot read the sandbox runner at {runner} ({exc.strerror}): "
            "reinstall Airlock so that sandbox/runner.py is present"
        ) from exc
    base_ref = offline_base_tag() if base == "offline" else REGISTRY_BASE
    dockerfile = _DOCKERFILE.substitute(
        base=base_ref, python=_PYTHON[base], uid=SANDBOX_UID, label=IMAGE_LABEL
    )
    return _Recipe(base=base_ref, dockerfile=dockerfile, runner=runner_bytes)


@contextmanager
def _engine_errors() -> Iterator[None]:
    """Translate "the engine is not there or not answering" into `EngineUnavailable`."""
    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        raise EngineUnavailable(
            f"the Docker engine is not usable ({exc}): {_START_DOCKER}, then retry"
        ) from exc


# --- the offline base -------------------------------------------------------------------


def _ensure_offline_base(client: docker.DockerClient, progress: Progress, *, force: bool) -> None:
    tag = offline_base_tag()
    if not force and image_exists(client, tag):
        progress(f"using base {tag}")
        return
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageUnavailable(
            "building the offline base image needs debootstrap, which is not installed: "
            "apt-get install debootstrap (or build on the registry base where a registry "
            "is reachable)"
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
        _prune(root)
        _import_tree(client, root, tag, progress)
    finally:
        _remove_tree(root, progress)
    with _engine_errors():
        size = client.images.get(tag).attrs["Size"]
    progress(f"base {tag} ready: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")


def _debootstrap(debootstrap: str, root: Path, progress: Progress) -> None:
    argv = [
        debootstrap,
        f"--variant={_DEBOOTSTRAP_VARIANT}",
        f"--include={','.join(_DEBOOTSTRAP_INCLUDE)}",
        DEBIAN_SUITE,
        str(root),
        DEBIAN_MIRROR,
    ]
    progress(f"bootstrapping Debian {DEBIAN_SUITE} from {DEBIAN_MIRROR} (takes about a minute)")
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                progress(f"debootstrap: {line}")
        except BaseException:
            # Let its exit trap unmount the /proc, /sys and /dev it mounted inside the tree.
            proc.terminate()
            raise
    if proc.returncode != 0:
        log = root / "debootstrap" / "debootstrap.log"
        log_tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
        raise ImageUnavailable(
            f"debootstrap failed with exit status {proc.returncode}; last output:\n"
            + "\n".join(f"  {line}" for line in [*tail, *log_tail])
            + f"\nCheck that {DEBIAN_MIRROR} is reachable from this machine (debootstrap "
            "downloads the packages from it), then run the image build again."
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
        with _engine_errors():
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


# --- the registry base and the layer ----------------------------------------------------


def _ensure_registry_base(client: docker.DockerClient, progress: Progress, *, force: bool) -> None:
    if not force and image_exists(client, REGISTRY_BASE):
        progress(f"using base {REGISTRY_BASE}")
        return
    progress(f"pulling {REGISTRY_BASE}")
    repository, _, version = REGISTRY_BASE.partition(":")
    with _engine_errors():
        try:
            for event in client.api.pull(repository, tag=version, stream=True, decode=True):
                _raise_on_error(event, f"pulling {REGISTRY_BASE} failed", [])
                # Per-layer byte counters would flood the callback; report state changes only.
                if event.get("status") and not event.get("progressDetail"):
                    progress(f"pull: {' '.join(filter(None, (event.get('id'), event['status'])))}")
        except docker.errors.APIError as exc:
            raise ImageUnavailable(
                f"pulling {REGISTRY_BASE} failed ({exc}): check that the registry is reachable, "
                "or build on the offline base"
            ) from exc


def _build_layer(
    client: docker.DockerClient, progress: Progress, recipe: _Recipe, *, nocache: bool
) -> None:
    tag = recipe.tag
    progress(f"building {tag} on {recipe.base}")
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    with _engine_errors():
        try:
            events = client.api.build(
                fileobj=_build_context(recipe),
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                nocache=nocache,
                decode=True,
                timeout=_BUILD_READ_TIMEOUT_S,
                labels={"airlock.version": airlock.__version__, "airlock.base": recipe.base},
                # The steps need no network; a build that cannot reach out cannot fetch
                # anything that is not in the recipe.
                network_mode="none",
                # Otherwise the SDK copies the host user's proxy settings into build args.
                use_config_proxy=False,
            )
            for event in events:
                for line in str(event.get("stream", "")).splitlines():
                    if line.strip():
                        tail.append(line)
                        progress(f"build: {line}")
                _raise_on_error(event, f"building {tag} failed", tail)
        except docker.errors.APIError as exc:
            raise ImageUnavailable(f"building {tag} failed: {exc}") from exc
    if not image_exists(client, tag):
        raise ImageUnavailable(f"the build of {tag} ended without creating it")
    progress(f"built {tag}")


def _build_context(recipe: _Recipe) -> io.BytesIO:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (
            ("Dockerfile", recipe.dockerfile.encode()),
            ("runner.py", recipe.runner),
        ):
            # COPY keeps the mode from the context and makes the file root-owned: 0644 lets
            # the sandbox user read the runner but not change it.
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    return context


def _raise_on_error(event: Mapping[str, Any], what: str, tail: Iterable[str]) -> None:
    if "error" not in event:
        return
    lines = "\n".join(f"  {line}" for line in tail)
    raise ImageUnavailable(
        f"{what}: {event['error']}" + (f"\nlast output:\n{lines}" if lines else "")
    )

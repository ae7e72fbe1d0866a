"""The offline Debian base an image is built on when no [image] base names one: Debian
bootstrapped with `debootstrap` on the build host, its packages installed with apt-get in a
chroot, pruned, and imported into the engine under a tag derived from the recipe.

Belongs here: the bootstrap recipe and its tag (`base_tag_of`), the build host's side of it
(as root, once), and cleaning up the tree even when debootstrap left mounts in it. Serves
the sandbox image (`image.py`) and the browser image (`browser_image.py`), each with its own
packages. Not here: which packages an image needs, a base pulled from a registry
(`registry.py`), or the layer built on the base (`image_build.py`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import docker
import docker.errors

from airlock.errors import ImageUnavailable

from .image_build import SCRATCH_DIR, TAIL_LINES, Progress, engine_errors, image_exists
from .streaming import run_streaming

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
_DEBOOTSTRAP_VARIANT = "minbase"


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
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "no_proxy"})


def base_tag_of(packages: tuple[str, ...], repository: str = "airlock-base") -> str:
    """The tag of a debootstrapped base holding `packages` (the browser image has its own)."""
    recipe = "\n".join(
        (DEBIAN_SUITE, _DEBOOTSTRAP_VARIANT, "apt-get --no-install-recommends", *packages, *_PRUNED)
    )
    return f"{repository}:{DEBIAN_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


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
    root = Path(tempfile.mkdtemp(prefix="airlock-base-", dir=SCRATCH_DIR)).resolve()
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
        argv, lambda line: progress(f"{label}: {line}"), env=env, tail_lines=TAIL_LINES
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

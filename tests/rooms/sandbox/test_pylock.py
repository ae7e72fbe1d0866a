"""The Python lock file: what it must pin, and fetching the wheels it names with pip.

pip runs for real against a local directory of wheels (no index, no network), the way it
runs against PyPI at image build.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from support import make_wheel

from airlock.errors import ImageUnavailable
from airlock.sandbox.image import ImageInputs, describe_toolbox, image_tag
from airlock.sandbox.pylock import default_lock, fetch_wheels, parse_lock, resolve_lock

SHA = "a" * 64


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip finds packages only in this directory (the host's index settings are replaced)."""
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def test_default_lock_pins_the_promised_packages_each_with_a_hash() -> None:
    lock = default_lock()
    names = {entry.name for entry in lock.entries}
    promised = {"numpy", "pandas", "matplotlib", "pillow", "scipy", "pyyaml", "beautifulsoup4"}
    promised |= {"lxml", "openpyxl", "requests", "httpx", "pytest"}
    # What test suites import while pytest collects them, and the build backends an
    # editable install uses.
    promised |= {"hypothesis", "coverage", "pytest-cov", "pytest-xdist", "mypy", "ruff"}
    promised |= {"setuptools", "hatchling", "editables", "flit-core"}
    assert promised <= {entry.name for entry in lock.requested} <= names
    assert all(entry.hashes for entry in lock.entries)


def test_entry_without_a_hash_is_refused_naming_the_package() -> None:
    text = f"numpy==2.0.0 \\\n    --hash=sha256:{SHA}\nrequests==2.31.0\n"
    with pytest.raises(ImageUnavailable, match=r"line 3: requests==2.31.0 has no --hash"):
        parse_lock(text, "test.lock")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f"requests>=2 --hash=sha256:{SHA}", "'requests>=2' is not pinned"),
        (f"requests --hash=sha256:{SHA}", "'requests' is not pinned"),
        ("-e git+https://example.com/x.git#egg=x", "'-e' is not pinned"),
        (f"requests==2.31.0 --index-url https://evil.example --hash=sha256:{SHA}", "options"),
        (f"requests==2.31.0 --hash=md5:{'a' * 32}", "options besides --hash"),
    ],
)
def test_anything_but_a_hash_pinned_entry_is_refused(line: str, reason: str) -> None:
    with pytest.raises(ImageUnavailable, match=reason):
        parse_lock(line + "\n", "test.lock")


def test_continuations_comments_and_markers_are_read() -> None:
    text = (
        "# a comment\n"
        "PyYAML==6.0.1 ; python_version >= '3.8' \\\n"
        f"    --hash=sha256:{SHA} \\\n"
        f"    --hash=sha256:{'b' * 64}  # the second wheel\n"
    )
    (entry,) = parse_lock(text, "test.lock").entries
    assert entry.pin == "pyyaml==6.0.1"
    assert entry.hashes == {SHA, "b" * 64}


def test_changing_the_lock_changes_the_image_tag() -> None:
    default = default_lock()
    changed = parse_lock(default.text + f"airlock-probe==1.0 --hash=sha256:{SHA}\n", "x.lock")
    assert image_tag(ImageInputs(python_lock=default)) == image_tag(ImageInputs())
    assert image_tag(ImageInputs(python_lock=changed)) != image_tag(ImageInputs())


def test_extra_debian_packages_change_the_image_tag() -> None:
    assert image_tag(ImageInputs(debian_packages=("graphviz",))) != image_tag(ImageInputs())


def test_fetch_returns_the_wheel_whose_hash_the_lock_pins(
    local_index: Path, tmp_path: Path
) -> None:
    wheel = make_wheel(local_index)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = parse_lock(f"airlock-probe==1.0 --hash=sha256:{digest}\n", "probe.lock")
    (fetched,) = fetch_wheels(lock, tmp_path / "cache", lambda line: None)
    assert fetched.read_bytes() == wheel.read_bytes()


def test_hash_mismatch_fails_naming_the_package(local_index: Path, tmp_path: Path) -> None:
    make_wheel(local_index)
    lock = parse_lock(f"airlock-probe==1.0 --hash=sha256:{SHA}\n", "probe.lock")
    with pytest.raises(ImageUnavailable, match=r"hash mismatch .*airlock[-_]probe==1\.0"):
        fetch_wheels(lock, tmp_path / "cache", lambda line: None)


def test_a_tampered_cached_wheel_is_not_used(local_index: Path, tmp_path: Path) -> None:
    wheel = make_wheel(local_index)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = parse_lock(f"airlock-probe==1.0 --hash=sha256:{digest}\n", "probe.lock")
    cache = tmp_path / "cache"
    (fetched,) = fetch_wheels(lock, cache, lambda line: None)
    fetched.write_bytes(b"tampered")
    # pip notices the bad file and fetches it again; what comes back is the pinned wheel.
    (again,) = fetch_wheels(lock, cache, lambda line: None)
    assert hashlib.sha256(again.read_bytes()).hexdigest() == digest


def test_resolve_writes_a_lock_pinning_each_wheel_by_hash(
    local_index: Path, tmp_path: Path
) -> None:
    wheel = make_wheel(local_index)
    requirements = tmp_path / "requirements.in"
    requirements.write_text("airlock_probe\n")
    text = resolve_lock(requirements, lambda line: None)
    (entry,) = parse_lock(text, "resolved.lock").entries
    assert entry.pin == "airlock-probe==1.0"
    assert entry.hashes == {hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert text.startswith("# Generated by `airlock image lock requirements.in` for CPython 3.11.2")


def test_resolve_names_what_was_requested_apart_from_its_dependencies(
    local_index: Path, tmp_path: Path
) -> None:
    make_wheel(local_index, requires="airlock_dep")
    make_wheel(local_index, name="airlock_dep", version="2.0")
    requirements = tmp_path / "requirements.in"
    requirements.write_text("airlock_probe\n")
    lock = parse_lock(resolve_lock(requirements, lambda line: None), "resolved.lock")
    assert [entry.pin for entry in lock.entries] == ["airlock-dep==2.0", "airlock-probe==1.0"]
    assert [entry.pin for entry in lock.requested] == ["airlock-probe==1.0"]


def test_the_requested_line_names_only_what_the_lock_pins() -> None:
    text = f"# requested: numpy, Not_Pinned\nnumpy==2.0.0 --hash=sha256:{SHA}\n"
    lock = parse_lock(text + f"six==1.0 --hash=sha256:{SHA}\n", "test.lock")
    assert [entry.name for entry in lock.requested] == ["numpy"]
    assert parse_lock(f"numpy==2.0.0 --hash=sha256:{SHA}\n", "old.lock").requested == ()


def test_the_description_names_the_requested_packages_not_their_dependencies() -> None:
    text = describe_toolbox(ImageInputs())
    lock = default_lock()
    for entry in lock.requested:
        assert f"{entry.name} {entry.version}" in text
    for name in ("h11", "et-xmlfile", "kiwisolver", "pluggy"):
        assert name not in text
    assert f"(and {len(lock.entries) - len(lock.requested)} packages these depend on)" in text
    # A lock that does not say what was requested is described whole.
    bare = parse_lock(f"h11==0.16.0 --hash=sha256:{SHA}\n", "bare.lock")
    assert "h11 0.16.0" in describe_toolbox(ImageInputs(python_lock=bare))

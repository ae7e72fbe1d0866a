"""The session's editable installs reach a sandbox Python's path as data: what a `.pth`
under /workspace/.editable may name, and what it may never do (sandbox/inside/editable_site.py,
run here on the host against a directory standing in for /workspace)."""

from __future__ import annotations

import os
from pathlib import Path

from airlock.sandbox.inside import editable_site, prestart


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    workspace = tmp_path / "workspace"
    editable = workspace / ".editable"
    (workspace / "proj" / "src").mkdir(parents=True)
    editable.mkdir()
    return workspace, editable


def test_a_path_line_inside_the_workspace_is_added_after_the_directory(tmp_path: Path) -> None:
    workspace, editable = _workspace(tmp_path)
    (editable / "__editable__.proj-1.0.pth").write_text(f"{workspace}/proj/src\n")
    (editable / "relative.pth").write_text("../proj\n# a comment\n\n")
    found = editable_site.editable_paths(str(editable), str(workspace))
    assert found == [str(editable), f"{workspace}/proj/src", f"{workspace}/proj"]


def test_import_lines_and_paths_outside_the_workspace_are_ignored(tmp_path: Path) -> None:
    workspace, editable = _workspace(tmp_path)
    marker = tmp_path / "ran"
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "escape").symlink_to(outside)
    (editable / "evil.pth").write_text(
        f"import os; open({str(marker)!r}, 'w')\n"
        f"import\tos; open({str(marker)!r}, 'w')\n"
        f"{outside}\n{workspace}/escape\n{workspace}/../outside\n{workspace}/missing\n"
        f"{workspace}/proj/src/../../proj/src\n"
    )
    os.mkfifo(editable / "fifo.pth")
    (editable / "not-a-pth.txt").write_text(f"{workspace}/proj\n")
    found = editable_site.editable_paths(str(editable), str(workspace))
    assert found == [str(editable), f"{workspace}/proj/src"]
    assert not marker.exists()


def test_no_editable_directory_adds_nothing(tmp_path: Path) -> None:
    assert editable_site.editable_paths(str(tmp_path / "none"), str(tmp_path)) == []


def test_prestart_and_the_site_module_name_one_directory() -> None:
    # prestart.py runs standalone in the image and cannot import this module; a job whose
    # workspace holds editable installs gets a fresh interpreter that puts them on its path.
    assert prestart.EDITABLE_DIR == editable_site.EDITABLE_DIR


def test_a_flood_of_lines_is_read_only_up_to_the_bound(tmp_path: Path) -> None:
    workspace, editable = _workspace(tmp_path)
    filler = "# filler\n" * editable_site.MAX_LINES
    (editable / "a-flood.pth").write_text(filler)
    (editable / "b-late.pth").write_text(f"{workspace}/proj/src\n")
    assert editable_site.editable_paths(str(editable), str(workspace)) == [str(editable)]

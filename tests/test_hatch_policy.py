"""The hatch's part of the policy: roots by name, protected globs, copy caps."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import AIRLOCK

from airlock.errors import PolicyInvalid
from airlock.policies import DEFAULT_PROTECTED, Policy, glob_matches, load_policy, protecting_glob


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
    ):
        assert protecting_glob(DEFAULT_PROTECTED, path) is not None, path
    for path in ("src/app.py", "README.md", "tests/test_app.py", ".github/ISSUE_TEMPLATE.md"):
        assert protecting_glob(DEFAULT_PROTECTED, path) is None, path


def test_policy_check_catches_a_relative_root_and_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[hatch.roots]\nrel = "repos/app"\ngone = "{tmp_path}/gone"\n', encoding="utf-8"
    )
    result = subprocess.run(
        [AIRLOCK, "policy", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "AIRLOCK_DATA_DIR": str(tmp_path / "data")},
    )
    report = result.stdout + result.stderr
    assert result.returncode == 1
    assert "hatch.roots.rel: " in report
    assert "is relative" in report
    assert "hatch.roots.gone: " in report
    assert "is not an existing directory" in report

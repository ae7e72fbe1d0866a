"""File globs: which paths of a copied-in repository the hatch holds back for a human.

Pure helpers shared by the policy model (to validate what an operator writes) and by
the rooms that enforce it (building a patch, applying one, probing with `airlock
drill`). Nothing here touches a filesystem.

A glob is matched against a whole path relative to the repository root, segment by
segment: `**` (a whole segment) matches zero or more segments, `*` any run of
characters within one segment, `?` one character; everything else matches itself.
Matching ignores case, because a patch applied on a case-insensitive filesystem
(macOS, Windows) writes `.GitHub/Workflows/x.yml` into `.github/workflows/`, and
holding back too much is the safe mistake.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

DEFAULT_PROTECTED: tuple[str, ...] = (
    # CI systems: whoever edits these runs code with the pipeline's deploy credentials.
    ".github/workflows/**",
    ".github/actions/**",
    ".gitlab-ci.yml",
    ".gitlab/**",
    ".circleci/**",
    "**/Jenkinsfile",
    ".travis.yml",
    "azure-pipelines.yml",
    ".azure-pipelines/**",
    "bitbucket-pipelines.yml",
    ".buildkite/**",
    ".drone.yml",
    ".woodpecker.yml",
    ".woodpecker/**",
    "cloudbuild.yaml",
    "appveyor.yml",
    # Who must review a change, and where submodules are fetched from.
    "CODEOWNERS",
    ".github/CODEOWNERS",
    "docs/CODEOWNERS",
    ".gitmodules",
    # Secrets, registry credentials, and files tools execute or load on a developer's
    # machine without asking (direnv, editors' task runners, git hooks managers).
    "**/.env*",
    "**/.npmrc",
    "**/.pypirc",
    "**/.netrc",
    ".vscode/**",
    ".devcontainer/**",
    ".husky/**",
    ".pre-commit-config.yaml",
)
"""Paths held back when a policy names none: CI and deploy configuration, code owners,
secrets and files run automatically on a reviewer's machine."""

DEFAULT_EXCLUDED: tuple[str, ...] = (
    "**/.env*",
    "**/.npmrc",
    "**/.pypirc",
    "**/.netrc",
    "**/.git-credentials",
    "**/.ssh/**",
    "**/.aws/**",
    "**/.docker/config.json",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
)
"""Paths a copy never takes into a sandbox when a policy names none: files that usually
hold credentials, since a sandbox holds no secret."""

DEFAULT_IGNORED: tuple[str, ...] = (
    "**/__pycache__/**",
    "**/*.pyc",
    "**/.pytest_cache/**",
    "**/.mypy_cache/**",
    "**/.ruff_cache/**",
    "**/node_modules/**",
)
"""New files a patch leaves out when a policy names none: caches and installed packages
that running a project's tests leaves behind."""

_FORBIDDEN = {
    "\\": "a backslash",
    "[": "a bracket",
    "]": "a bracket",
    "{": "a brace",
    "}": "a brace",
}


def validate_glob(glob: str) -> str:
    """`glob` unchanged if it is a valid protected-path glob; else ValueError saying why.

    A glob is relative (no leading "/"), has no empty, "." or ".." segment, uses `**`
    only as a whole segment, and has no backslash, bracket, brace or control character.
    """
    if not glob:
        raise ValueError('a glob cannot be empty; write a path such as ".github/workflows/**"')
    if glob.startswith("/"):
        raise ValueError(
            f"{_q(glob)} starts with /; globs are relative to the repository root, "
            f"so write {_q(glob.lstrip('/'))}"
        )
    for char, called in _FORBIDDEN.items():
        if char in glob:
            raise ValueError(
                f"{_q(glob)} contains {called} ({_q(char)}); only *, ** and ? are "
                'wildcards, so list each path, such as "a.yml" and "b.yml"'
            )
    if any(not ch.isprintable() for ch in glob):
        raise ValueError(f"{_q(glob)} contains a control character; remove it")
    for segment in glob.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(
                f'{_q(glob)} has an empty, "." or ".." segment; write the path from the '
                'repository root, such as "deploy/**"'
            )
        if "**" in segment and segment != "**":
            raise ValueError(
                f'{_q(glob)} has {_q(segment)}; "**" matches whole segments, so write it '
                'alone between slashes, as in "**/.env*"'
            )
    return glob


def glob_matches(glob: str, path: str) -> bool:
    """Whether the relative `path` falls under `glob`, ignoring case."""
    segments = path.casefold().split("/")
    reachable = {0}
    for wanted in glob.casefold().split("/"):
        if wanted == "**":
            reachable = set(range(min(reachable), len(segments) + 1))
            continue
        pattern = _segment_regex(wanted)
        reachable = {
            i + 1 for i in reachable if i < len(segments) and pattern.fullmatch(segments[i])
        }
        if not reachable:
            return False
    return len(segments) in reachable


def protecting_glob(globs: Iterable[str], path: str) -> str | None:
    """The first of `globs` that `path` falls under, or None if none does."""
    return next((glob for glob in globs if glob_matches(glob, path)), None)


def _segment_regex(segment: str) -> re.Pattern[str]:
    parts = []
    for char in segment:
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


def _q(text: str) -> str:
    """`text` in double quotes, as TOML writes strings, for messages."""
    return json.dumps(text, ensure_ascii=False)

"""File globs: which paths of a copied-in repository the hatch holds back for a human.

Pure helpers shared by the policy model (to validate what an operator writes) and by
the rooms that enforce it (building a patch, applying one, probing with `airlock
drill`). Nothing here touches a filesystem.

A glob is matched against a whole path relative to the repository root, segment by
segment: `**` (a whole segment) matches zero or more segments, `*` any run of
characters within one segment, `?` one character; everything else matches itself.
Matching reads a path as a case-insensitive filesystem would, because a patch applied
on macOS or Windows writes `.GitHub/Workflows/x.yml` into `.github/workflows/`, and so
do `.github./workflows/x.yml`, `.github /workflows/x.yml` and `x.yml::$DATA` on Windows
(`canonical_segment` undoes each, for every list). A Windows 8.3 short name (`GITHUB~1`)
may stand for any name, so a protected glob counts it as matching; excluded and ignored
paths do not. Holding back too much is the safe mistake.

The default lists are data: each entry is one glob, and the tests take every entry in
turn, in every spelling above.

Matched here rather than with pathspec or wcmatch (weighed in issue 30): both compile a
whole pattern into one regular expression with gitignore's or a shell's meanings (a
slash-less gitignore pattern matches at any depth; brackets, braces, negation), while
these rules walk a path by segment, each canonicalized, with a possible short name standing
for any one segment. What either would replace is `_segment_regex`, ten lines.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable

DEFAULT_PROTECTED: tuple[str, ...] = (
    # CI systems: whoever edits these runs code with the pipeline's deploy credentials.
    # All of `.github/`, not only workflows and actions: dependabot.yml, CODEOWNERS, issue
    # and funding files and whatever GitHub reads there next steer what CI and reviewers do.
    ".github/**",
    "action.yml",
    "action.yaml",
    ".gitea/workflows/**",
    ".forgejo/workflows/**",
    ".gitlab-ci.yml",
    ".gitlab/**",
    ".circleci/**",
    "**/Jenkinsfile",
    ".travis.yml",
    "azure-pipelines.yml",
    "azure-pipelines.yaml",
    ".azure-pipelines/**",
    "bitbucket-pipelines.yml",
    ".buildkite/**",
    ".drone.yml",
    ".woodpecker.yml",
    ".woodpecker/**",
    "cloudbuild.yaml",
    "cloudbuild.yml",
    "buildspec.yml",
    "buildspec.yaml",
    ".cirrus.yml",
    ".cirrus.star",
    ".semaphore/**",
    "appveyor.yml",
    ".appveyor.yml",
    ".teamcity/**",
    ".tekton/**",
    "bitrise.yml",
    "codemagic.yaml",
    # Deploy platforms that run the build command a file in the repository names.
    "netlify.toml",
    "vercel.json",
    "render.yaml",
    # Who must review a change, and where submodules are fetched from.
    "CODEOWNERS",
    "docs/CODEOWNERS",
    ".gitmodules",
    # Secrets and registry settings (a changed registry serves the next install's code).
    "**/.env*",
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/.pypirc",
    "**/.netrc",
    "**/.cargo/config",
    "**/.cargo/config.toml",
    # Files tools execute or load on a developer's machine without asking: editors' task
    # runners, cloud workspaces, git hook managers, package managers' hooks, and coding
    # agents' settings (hooks, allowed commands) and MCP servers (commands they start).
    ".vscode/**",
    ".idea/**",
    ".devcontainer/**",
    ".devcontainer.json",
    ".gitpod.yml",
    ".gitpod.Dockerfile",
    ".husky/**",
    ".githooks/**",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    "lefthook.yaml",
    ".lefthook.yml",
    ".lefthook.yaml",
    "lefthook-local.yml",
    ".overcommit.yml",
    "**/.pnpmfile.cjs",
    ".claude/**",
    ".mcp.json",
    ".cursor/**",
    ".gemini/**",
)
"""Paths held back when a policy names none: CI and deploy configuration, code owners,
secrets and files run automatically on a reviewer's machine."""

DEFAULT_EXCLUDED: tuple[str, ...] = (
    "**/.env*",
    # Package registries' credentials.
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/.pypirc",
    "**/pip.conf",
    "**/.cargo/credentials",
    "**/.cargo/credentials.toml",
    "**/.gem/credentials",
    "**/auth.json",
    "**/.m2/settings.xml",
    "**/.m2/settings-security.xml",
    "**/.gradle/gradle.properties",
    "**/.nuget/NuGet.Config",
    "**/.docker/config.json",
    # Git, databases, clusters and infrastructure tools.
    "**/.netrc",
    "**/.git-credentials",
    "**/.config/gh/hosts.yml",
    "**/.pgpass",
    "**/.my.cnf",
    "**/.kube/**",
    "**/.vault-token",
    "**/.terraformrc",
    "**/credentials.tfrc.json",
    "**/*.tfstate",
    "**/*.tfstate.backup",
    # Clouds: AWS, Google (service-account keys, gcloud's own), Azure, S3 tools.
    "**/.aws/**",
    "**/.config/gcloud/**",
    "**/application_default_credentials.json",
    "**/*service-account*.json",
    "**/*service_account*.json",
    "**/credentials.json",
    "**/client_secret*.json",
    "**/.azure/**",
    "**/.s3cfg",
    "**/.boto",
    # Keys and certificates.
    "**/.ssh/**",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/id_rsa*",
    "**/id_dsa*",
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
    "**/.hypothesis/**",
    "**/.tox/**",
    "**/.coverage",
    "**/.coverage.*",
    "**/htmlcov/**",
    "**/*.egg-info/**",
    "**/build/**",
    "**/dist/**",
    "**/node_modules/**",
)
"""New files a patch leaves out when a policy names none: caches, coverage data, build
output and installed packages that running a project's tests or an editable install leaves
behind (files the copy brought in under these names are never ignored)."""

# A Windows 8.3 short name (`GITHUB~1`, `GITLAB~1.YML`): at most 8 characters before the
# dot, a tilde and digits among them, at most 3 after. It may stand for any long name in
# its directory: Windows makes some from a hash of the long name (`GI3A7C~1`).
_SHORT_NAME = re.compile(r"(?=[^.]{2,8}(?:\.|$))[^.~]+~[0-9]+(?:\.[^.]{1,3})?")

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
    only as a whole segment, has no backslash, bracket, brace, colon or control
    character, and no segment ends in a dot or space (no path is read so).
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
    if ":" in glob:
        raise ValueError(
            f"{_q(glob)} contains a colon; Windows reads what follows one as a data stream "
            f"of the file before it, so write {_q(glob.split(':', 1)[0])}"
        )
    for segment in glob.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(
                f'{_q(glob)} has an empty, "." or ".." segment; write the path from the '
                'repository root, such as "deploy/**"'
            )
        if segment.rstrip(". ") != segment:
            raise ValueError(
                f"{_q(glob)} has {_q(segment)}, which ends in a dot or space: Windows drops "
                f"those from names, so write {_q(segment.rstrip('. '))}"
            )
        if "**" in segment and segment != "**":
            raise ValueError(
                f'{_q(glob)} has {_q(segment)}; "**" matches whole segments, so write it '
                'alone between slashes, as in "**/.env*"'
            )
    return glob


def canonical_segment(segment: str) -> str:
    """One path segment as a case-insensitive Windows or macOS filesystem reads it: case
    folded, an NTFS alternate data stream dropped (`ci.yml::$DATA` and `ci.yml:x` are
    `ci.yml`), then trailing dots and spaces dropped (`.github.` and `.github ` are
    `.github`). The one place these spellings are undone, for globs and for `.git`.
    Upper-cased before folding: NTFS and exFAT compare by upcase tables, which make the
    dotless i (U+0131) an `I` (so `.g\u0131t` is `.git` there); `casefold` alone keeps
    it apart. In NFC, since macOS reads a name in either normal form as the same name."""
    return _folded(segment).split(":", 1)[0].rstrip(". ")


def _folded(text: str) -> str:
    return unicodedata.normalize("NFC", text.upper().casefold())


def glob_matches(glob: str, path: str, *, short_names: bool = False) -> bool:
    """Whether the relative `path` falls under `glob`, read as a case-insensitive
    filesystem reads it (`canonical_segment`). With `short_names`, a segment that may be
    a Windows short name matches any one segment of the glob, since it may stand for it."""
    segments = [canonical_segment(segment) for segment in path.split("/")]
    reachable = {0}
    for wanted in _folded(glob).split("/"):
        if wanted == "**":
            reachable = set(range(min(reachable), len(segments) + 1))
            continue
        pattern = _segment_regex(wanted)
        reachable = {
            i + 1
            for i in reachable
            if i < len(segments)
            and (
                pattern.fullmatch(segments[i])
                or (short_names and _SHORT_NAME.fullmatch(segments[i]))
            )
        }
        if not reachable:
            return False
    return len(segments) in reachable


def protecting_glob(globs: Iterable[str], path: str) -> str | None:
    """The first of `globs` that holds `path` back, or None: protected paths, where a
    name that may be a Windows short name for a protected one counts as that one (a
    patch may be applied on Windows)."""
    return next((glob for glob in globs if glob_matches(glob, path, short_names=True)), None)


def matching_glob(globs: Iterable[str], path: str) -> str | None:
    """The first of `globs` that `path` falls under, or None: excluded and ignored
    paths, where a short name stands only for itself (a copy reads the host's real
    names, and a name held in a patch by mistake is kept out of sight)."""
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

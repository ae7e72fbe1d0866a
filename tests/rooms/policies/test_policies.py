"""Tests of the policies room: the model's rules, loading files and the schema."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel

from airlock.errors import PolicyInvalid
from airlock.policies import (
    FileLimits,
    Limits,
    OutputLimits,
    Policy,
    PoolSettings,
    SandboxSettings,
    SessionSettings,
    load_policy,
    policy_json_schema,
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PolicyInvalid) as caught:
        load_policy(_write(tmp_path, text))
    return caught.value.problems


def test_packaged_default_loads_to_model_defaults() -> None:
    assert load_policy(None) == Policy()


def test_packaged_default_writes_out_every_key() -> None:
    # The shipped file is the operator's documentation, so a new field must appear
    # in it; only fields whose default is "absent" (None, or no entries, such as
    # egress.allow) are left as comments.
    text = resources.files("airlock.policies").joinpath("default.toml").read_text(encoding="utf-8")
    written = tomllib.loads(text)
    for name, field in Policy.model_fields.items():
        if not isinstance(field.default, BaseModel):
            assert name in written, name
            continue
        expected = {
            k
            for k, f in type(field.default).model_fields.items()
            if f.default is not None and f.default != ()
        }
        assert set(written[name]) == expected, name


def test_empty_file_loads_to_model_defaults(tmp_path: Path) -> None:
    assert load_policy(_write(tmp_path, "")) == Policy()


def test_custom_file_overrides_only_the_keys_it_sets(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        [sandbox]
        image = "example/sandbox:1"
        runtime = "runsc"

        [limits]
        timeout_s = 60
        cpus = 2

        [pool]
        size = 2
        """,
    )

    policy = load_policy(path)

    assert policy == Policy(
        sandbox=SandboxSettings(image="example/sandbox:1", runtime="runsc"),
        limits=Limits(timeout_s=60, cpus=2.0),
        pool=PoolSettings(size=2),
    )
    assert policy.output == OutputLimits()
    assert policy.files == FileLimits()
    assert policy.sessions == SessionSettings()


def test_policy_is_frozen() -> None:
    policy = Policy()
    with pytest.raises(ValueError, match="frozen"):
        policy.limits.timeout_s = 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\nbogus = 1", "limits.bogus: unknown key; remove it or check its spelling"),
        ("bogus = 1", "bogus: unknown key; remove it or check its spelling"),
        ("[egress]\nbogus = 1", "egress.bogus: unknown key; remove it or check its spelling"),
    ],
)
def test_rejects_unknown_key_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    [problem] = _problems(tmp_path, text)
    assert problem.startswith(expected)


def test_an_unknown_key_lists_the_keys_of_its_table(tmp_path: Path) -> None:
    assert _problems(tmp_path, "[egress]\nbogus = 1") == [
        "egress.bogus: unknown key; remove it or check its spelling "
        "(the keys here are allow, limits, upstream_ca_file)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[limits]\nmax_timout_s = 100",
            "limits.max_timout_s: unknown key (did you mean 'max_timeout_s'?)",
        ),
        ("[limts]\ntimeout_s = 5", "limts: unknown key (did you mean 'limits'?)"),
        (
            '[capabilities.gh]\nhosts = ["a.example"]\nmethods = ["GET"]\npaths = ["/"]\n'
            'approvl = "ask"',
            "capabilities.gh.approvl: unknown key (did you mean 'approval'?)",
        ),
        (
            '[[egress.allow]]\nname = "a"\nhosts = ["a.example"]\nmethod = ["GET"]\npaths = ["/"]',
            "egress.allow[0].method: unknown key (did you mean 'methods'?)",
        ),
    ],
)
def test_a_misspelt_key_gets_the_nearest_one_suggested(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert _problems(tmp_path, text)[0] == expected


def test_problems_are_in_words_not_in_pydantic_phrasing(tmp_path: Path) -> None:
    text = """
        version = 3
        [limits]
        timeout_s = "soon"
        memory_mb = 1
        cpus = nan
        [sandbox]
        runtime = "kata"
        image = ""
        [capabilities.x]
        description = "no hosts"
        [files]
        max_input_files = 0
    """
    problems = _problems(tmp_path, text)
    assert len(problems) == 10, problems
    for problem in problems:
        assert "Input should" not in problem and "Field required" not in problem, problem
        assert "pydantic" not in problem and "[type=" not in problem, problem
    assert "capabilities.x.hosts: required but missing" in problems


def test_every_problem_of_a_capability_is_listed_at_once(tmp_path: Path) -> None:
    text = """
        [capabilities.gh]
        hosts = ["api.github.com"]
        secret = "token"
        params = { org = "^[a-z]+$" }
        ttl = "2h"
    """
    problems = _problems(tmp_path, text)
    assert [p.split(":")[0] for p in problems] == ["capabilities.gh"] * 5
    joined = "\n".join(problems)
    for words in (
        "inject is missing",
        "methods is missing",
        "paths is missing",
        '"org"',
        "max_ttl",
    ):
        assert words in joined


def test_missing_methods_and_paths_are_listed_beside_other_problems(tmp_path: Path) -> None:
    # A bad host makes pydantic skip the capability's own checks; they are listed anyway.
    text = """
        [capabilities.x]
        hosts = ["*"]
        [[egress.allow]]
        name = "r"
        hosts = ["a.example"]
        methods = ["FETCH"]
    """
    assert [p.split(":")[0] for p in _problems(tmp_path, text)] == [
        "capabilities.x.hosts[0]",
        "capabilities.x",
        "capabilities.x",
        "egress.allow[0].methods[0]",
        "egress.allow[0]",
    ]


def test_the_schema_requires_methods_and_paths_unless_passthrough() -> None:
    schema = policy_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    base = {"hosts": ["api.example.com"]}
    assert not validator.is_valid({"capabilities": {"a": base}})
    assert not validator.is_valid({"capabilities": {"a": {**base, "methods": ["GET"]}}})
    assert validator.is_valid({"capabilities": {"a": {**base, "methods": ["GET"], "paths": ["/"]}}})
    assert validator.is_valid({"capabilities": {"a": {**base, "tls": "passthrough"}}})
    passthrough_with_paths = {**base, "tls": "passthrough", "paths": ["/"]}
    assert not validator.is_valid({"capabilities": {"a": passthrough_with_paths}})
    assert not validator.is_valid({"egress": {"allow": [{"name": "r", **base}]}})


@pytest.mark.parametrize(
    ("text", "key", "other"),
    [
        ("[limits]\ntimeout_s = 301", "timeout_s", "max_timeout_s"),
        ("[limits]\ntimeout_s = 20\nmax_timeout_s = 10", "timeout_s", "max_timeout_s"),
        ("[output]\ninline_bytes = 9000000", "inline_bytes", "stream_cap_bytes"),
        ("[sessions]\nidle_ttl_s = 30000", "idle_ttl_s", "max_lifetime_s"),
    ],
)
def test_rejects_value_above_its_ceiling_naming_both_keys(
    tmp_path: Path, text: str, key: str, other: str
) -> None:
    [problem] = _problems(tmp_path, text)
    assert f"{key} (" in problem
    assert f"{other} (" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\ntimeout_s = 0", "limits.timeout_s: must be at least 1"),
        ("[limits]\ntimeout_s = -5", "limits.timeout_s: must be at least 1"),
        ("[limits]\nmax_timeout_s = 3601", "limits.max_timeout_s: must be at most 3600"),
        ("[limits]\nmemory_mb = 0", "limits.memory_mb: must be at least 64"),
        ("[limits]\ncpus = -1.0", "limits.cpus: must be at least 0.1"),
        ("[limits]\ncpus = nan", "limits.cpus: must be a finite number"),
        ("[limits]\npids = 0", "limits.pids: must be at least 16"),
        ("[limits]\nworkspace_mb = 0", "limits.workspace_mb: must be at least 1"),
        ("[limits]\ntmp_mb = -1", "limits.tmp_mb: must be at least 1"),
        ("[output]\ninline_bytes = 0", "output.inline_bytes: must be at least 1"),
        ("[files]\nmax_input_files = 0", "files.max_input_files: must be at least 1"),
        ("[files]\nmax_path_length = -1", "files.max_path_length: must be at least 1"),
        ("[sessions]\nidle_ttl_s = 0", "sessions.idle_ttl_s: must be at least 1"),
        ("[pool]\nsize = -1", "pool.size: must be at least 0"),
        ("[pool]\nsize = 65", "pool.size: must be at most 64"),
    ],
)
def test_rejects_value_out_of_range_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    [problem] = _problems(tmp_path, text)
    assert problem.startswith(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[limits]\ntimeout_s = "30"', "limits.timeout_s: must be a whole number"),
        ("[limits]\ntimeout_s = true", "limits.timeout_s: must be a whole number"),
        ("[limits]\ntimeout_s = 1.5", "limits.timeout_s: must be a whole number"),
        ('[sandbox]\nruntime = "kata"', "sandbox.runtime: must be 'auto', 'runc' or 'runsc'"),
        ('[sandbox]\nimage = ""', "sandbox.image: must not be empty"),
        ("version = 2", "version: must be 1"),
        ("limits = 5", "limits: must be a table with timeout_s, max_timeout_s, memory_mb"),
        (
            '[image]\npython_lock = "locks/python.lock"',
            'image.python_lock: python_lock "locks/python.lock" is relative; write the absolute',
        ),
        (
            '[image]\ndebian_packages = ["ok", "Bad Name;rm"]',
            'image.debian_packages: "Bad Name;rm" is not a Debian package name',
        ),
        ('[image]\ndebian_packages = "ffmpeg"', "image.debian_packages: must be"),
    ],
)
def test_rejects_value_of_wrong_type_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    [problem] = _problems(tmp_path, text)
    assert problem.startswith(expected)


def test_reports_every_problem_in_one_error(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        """
        [limits]
        timeout_s = 0
        memory_mb = 1
        typo = 3

        [pool]
        size = -1
        """,
    )

    assert [p.split(":")[0] for p in problems] == [
        "limits.timeout_s",
        "limits.memory_mb",
        "limits.typo",
        "pool.size",
    ]


def test_reports_toml_syntax_error_with_its_line(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "[limits]\ntimeout_s = = 3\n")

    assert len(problems) == 1
    assert problems[0].startswith("not valid TOML:")
    assert "line 2" in problems[0]


def test_reports_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(b"[limits]\n# \xff\n")

    with pytest.raises(PolicyInvalid) as caught:
        load_policy(path)

    assert caught.value.problems[0].startswith("not UTF-8 text:")


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"

    with pytest.raises(PolicyInvalid) as caught:
        load_policy(path)

    assert caught.value.source == str(path)
    assert str(path) in str(caught.value)
    assert caught.value.problems == ["cannot read the file: No such file or directory"]


def test_json_schema_describes_the_sections() -> None:
    schema = policy_json_schema()

    assert set(schema["properties"]) == {
        "version",
        "sandbox",
        "image",
        "limits",
        "output",
        "files",
        "sessions",
        "tasks",
        "pool",
        "browser",
        "capabilities",
        "egress",
        "broker",
        "tenants",
        "hatch",
        "console",
    }
    assert schema["additionalProperties"] is False
    limits = schema["$defs"]["Limits"]["properties"]
    assert limits["timeout_s"]["default"] == 30
    assert "description" in limits["timeout_s"]

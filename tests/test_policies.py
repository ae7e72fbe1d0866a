"""Tests of the policies room: the model's rules, loading files and the schema."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest
from pydantic import BaseModel

from airlock.errors import PolicyInvalid
from policies import (
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
    text = resources.files("policies").joinpath("default.toml").read_text(encoding="utf-8")
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
        size = 4
        """,
    )

    policy = load_policy(path)

    assert policy == Policy(
        sandbox=SandboxSettings(image="example/sandbox:1", runtime="runsc"),
        limits=Limits(timeout_s=60, cpus=2.0),
        pool=PoolSettings(size=4),
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
    assert _problems(tmp_path, text) == [expected]


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
        ("[limits]\ntimeout_s = 0", "limits.timeout_s: Input should be greater than 0"),
        ("[limits]\ntimeout_s = -5", "limits.timeout_s: Input should be greater than 0"),
        ("[limits]\nmax_timeout_s = 3601", "limits.max_timeout_s: Input should be less than"),
        ("[limits]\nmemory_mb = 0", "limits.memory_mb: Input should be greater than or equal"),
        ("[limits]\ncpus = -1.0", "limits.cpus: Input should be greater than or equal"),
        ("[limits]\ncpus = nan", "limits.cpus: Input should be a finite number"),
        ("[limits]\npids = 0", "limits.pids: Input should be greater than or equal"),
        ("[limits]\nworkspace_mb = 0", "limits.workspace_mb: Input should be greater than 0"),
        ("[limits]\ntmp_mb = -1", "limits.tmp_mb: Input should be greater than 0"),
        ("[output]\ninline_bytes = 0", "output.inline_bytes: Input should be greater than 0"),
        ("[files]\nmax_input_files = 0", "files.max_input_files: Input should be greater than 0"),
        ("[files]\nmax_path_length = -1", "files.max_path_length: Input should be greater than 0"),
        ("[sessions]\nidle_ttl_s = 0", "sessions.idle_ttl_s: Input should be greater than 0"),
        ("[pool]\nsize = -1", "pool.size: Input should be greater than or equal to 0"),
        ("[pool]\nsize = 65", "pool.size: Input should be less than or equal to 64"),
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
        ('[limits]\ntimeout_s = "30"', "limits.timeout_s: Input should be a valid integer"),
        ("[limits]\ntimeout_s = true", "limits.timeout_s: Input should be a valid integer"),
        ("[limits]\ntimeout_s = 1.5", "limits.timeout_s: Input should be a valid integer"),
        ('[sandbox]\nruntime = "kata"', "sandbox.runtime: Input should be 'runc' or 'runsc'"),
        ('[sandbox]\nimage = ""', "sandbox.image: String should have at least 1 character"),
        ("version = 2", "version: Input should be 1"),
        ("limits = 5", "limits: Input should be a valid dictionary"),
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
        "limits",
        "output",
        "files",
        "sessions",
        "pool",
        "capabilities",
        "egress",
        "broker",
        "tenants",
        "hatch",
    }
    assert schema["additionalProperties"] is False
    limits = schema["$defs"]["Limits"]["properties"]
    assert limits["timeout_s"]["default"] == 30
    assert "description" in limits["timeout_s"]

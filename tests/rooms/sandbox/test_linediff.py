"""The bounded line diff: exact always, shortest within its budget, and never past it."""

from __future__ import annotations

import difflib
import random

import pytest

from airlock.sandbox.linediff import LineDiff, diff_lines, grouped


def _apply(diff: LineDiff, a: list[bytes], b: list[bytes]) -> list[bytes]:
    """`a` turned by the opcodes, checking they tile both sides in order."""
    out: list[bytes] = []
    i = j = 0
    for tag, i1, i2, j1, j2 in diff.opcodes:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    return out


def _kept(diff: LineDiff) -> int:
    return sum(i2 - i1 for tag, i1, i2, _, _ in diff.opcodes if tag == "equal")


def _lcs(a: list[bytes], b: list[bytes]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b):
            diagonal, row[j + 1] = row[j + 1], diagonal + 1 if x == y else max(row[j], row[j + 1])
    return row[-1]


@pytest.mark.parametrize("seed", range(300))
def test_diffs_are_exact_and_shortest_within_budget(seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.choice([b"a\n", b"b\n", b"c\n"]) for _ in range(rng.randint(0, 25))]
    b = [rng.choice([b"a\n", b"b\n", b"c\n", b"d"]) for _ in range(rng.randint(0, 25))]
    diff = diff_lines(a, b, max_work=1 << 20)
    assert _apply(diff, a, b) == b
    assert not diff.whole
    assert _kept(diff) == _lcs(a, b)
    # Shortest: never more changed lines than difflib's answer.
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    assert _kept(diff) >= sum(size for _, _, size in matcher.get_matching_blocks())


@pytest.mark.parametrize("seed", range(100))
def test_past_the_budget_the_middle_is_replaced_whole_and_still_exact(seed: int) -> None:
    rng = random.Random(seed)
    common = [b"head\n", b"x\n"]
    a = common + [rng.choice([b"a\n", b"b\n"]) for _ in range(200)] + common
    b = common + [rng.choice([b"a\n", b"b\n"]) for _ in range(200)] + common
    diff = diff_lines(a, b, max_work=50)
    assert diff.whole
    assert _apply(diff, a, b) == b
    assert [tag for tag, *_ in diff.opcodes] == ["equal", "replace", "equal"]
    # One snake past the budget at most, and a snake is never longer than a side.
    assert diff.work <= 50 + len(a)


def test_work_is_bounded_on_hostile_lines() -> None:
    rng = random.Random(7)
    a = [rng.choice([b"x\n", b"y\n"]) for _ in range(50_000)]
    b = [rng.choice([b"x\n", b"y\n"]) for _ in range(50_000)]
    diff = diff_lines(a, b, max_work=100_000)
    assert diff.whole and diff.work <= 100_000 + len(a)
    assert _apply(diff, a, b) == b


def test_hunks_are_grouped_as_difflib_groups_them() -> None:
    a = [b"%d\n" % i for i in range(100)]
    b = list(a)
    b[10], b[50], b[53] = b"ten\n", b"fifty\n", b"fifty-three\n"
    del b[90]
    diff = diff_lines(a, b, max_work=1 << 20)
    expected = difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3)
    assert list(grouped(diff.opcodes, 3)) == [list(group) for group in expected]

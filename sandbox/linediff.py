"""A line diff whose cost has a hard bound: Myers's greedy algorithm with a work budget.

Pure: a function of two lists of lines; no I/O. The lines come from a sandbox, so their
shape is chosen by an attacker, and an unbounded diff (difflib's `SequenceMatcher` took
80 s on a repetitive 125 KB lock file) would be paid for in server CPU. Here:

- the common first and last lines are matched in one linear pass each;
- the lines between are numbered (one dict lookup per line), and Myers's O((N+M)D)
  search runs on the numbers, counting one unit of work for every diagonal it visits
  and every pair of lines it compares;
- when the work would pass `budget(...)`, the search stops and the lines between the
  common ends are given as replaced whole: still an exact diff, only a longer one.

So the work of one diff is at most `MIN_WORK` plus `WORK_PER_BYTE` units per byte of its
two sides (and one last snake), about 0.15 s of CPU per million units; its memory (the
search's trace, a 4-byte int per diagonal visited) is bounded by that work too.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

MIN_WORK = 1 << 16
"""Work every diff may spend, however small its files: exact diffs of source files."""
WORK_PER_BYTE = 4
"""Work allowed per byte of the two sides: a budget proportional to what changed."""

Tag = Literal["equal", "replace", "delete", "insert"]
Opcode = tuple[Tag, int, int, int, int]
"""(tag, i1, i2, j1, j2) as difflib writes them: old[i1:i2] becomes new[j1:j2]."""
Block = tuple[int, int, int]
"""(i, j, size): old[i:i+size] equals new[j:j+size]."""


@dataclass(frozen=True)
class LineDiff:
    opcodes: tuple[Opcode, ...]
    work: int
    """Units of work spent (diagonals visited plus lines compared)."""
    whole: bool
    """True when the budget ran out and the middle is given as replaced whole."""


def budget(old_bytes: int, new_bytes: int) -> int:
    """The work a diff of files of these sizes may spend."""
    return MIN_WORK + WORK_PER_BYTE * (old_bytes + new_bytes)


def diff_lines(a: Sequence[bytes], b: Sequence[bytes], max_work: int) -> LineDiff:
    """The opcodes turning `a` into `b`, spending at most about `max_work` units."""
    n, m = len(a), len(b)
    head = 0
    while head < n and head < m and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    numbers: dict[bytes, int] = {}
    x = [numbers.setdefault(line, len(numbers)) for line in a[head : n - tail]]
    y = [numbers.setdefault(line, len(numbers)) for line in b[head : m - tail]]
    found, work = _myers(x, y, max_work)
    whole = found is None
    blocks = found or []
    matched = [(0, 0, head)] if head else []
    matched += [(i + head, j + head, size) for i, j, size in blocks]
    if tail:
        matched.append((n - tail, m - tail, tail))
    return LineDiff(opcodes=tuple(_opcodes(matched, n, m)), work=work, whole=whole)


def _myers(a: list[int], b: list[int], max_work: int) -> tuple[list[Block] | None, int]:
    """Matching blocks of a shortest edit script (None once the work passes `max_work`,
    which a single last snake may overshoot) and the work spent.

    The forward greedy search of Myers (1986): `v[k]` is the furthest x reached on
    diagonal k = x - y with d edits; `trace[d]` keeps v as it was before step d, for the
    walk back.
    """
    n, m = len(a), len(b)
    if not n or not m:
        return [], 0
    # d steps visit (d + 1)(d + 2) / 2 diagonals, so d never passes the root of twice the budget.
    reach = min(n + m, int((2 * max_work) ** 0.5) + 1)
    offset = reach + 1
    v = [0] * (2 * reach + 3)
    trace: list[array[int]] = []
    work = 0
    for d in range(reach + 1):
        trace.append(array("i", v[offset - d : offset + d + 1]))
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            work += 1 + x - start
            v[offset + k] = x
            if x >= n and y >= m:
                return _walk_back(trace, n, m, d), work
            if work > max_work:
                return None, work
    return None, work


def _walk_back(trace: list[array[int]], n: int, m: int, steps: int) -> list[Block]:
    blocks: list[Block] = []
    x, y = n, m
    for d in range(steps, 0, -1):
        before = trace[d]  # v before step d, diagonals -d..d at index k + d
        k = x - y
        if k == -d or (k != d and before[k - 1 + d] < before[k + 1 + d]):
            prev_k = k + 1  # an insertion: one step down from diagonal k + 1
            prev_x = before[prev_k + d]
            start_x, start_y = prev_x, prev_x - prev_k + 1
        else:
            prev_k = k - 1  # a deletion: one step right from diagonal k - 1
            prev_x = before[prev_k + d]
            start_x, start_y = prev_x + 1, prev_x - prev_k
        if x > start_x:
            blocks.append((start_x, start_y, x - start_x))
        x, y = prev_x, prev_x - prev_k
    if x:
        blocks.append((0, 0, x))
    blocks.reverse()
    return blocks


def _opcodes(matched: list[Block], n: int, m: int) -> Iterator[Opcode]:
    i = j = 0
    for bi, bj, size in [*matched, (n, m, 0)]:
        if i < bi and j < bj:
            yield ("replace", i, bi, j, bj)
        elif i < bi:
            yield ("delete", i, bi, j, bj)
        elif j < bj:
            yield ("insert", i, bi, j, bj)
        i, j = bi + size, bj + size
        if size:
            yield ("equal", bi, i, bj, j)


def grouped(opcodes: Sequence[Opcode], context: int) -> Iterator[list[Opcode]]:
    """The opcodes in hunks with `context` equal lines around each change, as difflib's
    `get_grouped_opcodes` groups them."""
    codes = list(opcodes)
    if not codes or all(code[0] == "equal" for code in codes):
        return
    tag, i1, i2, j1, j2 = codes[0]
    if tag == "equal":
        codes[0] = (tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    tag, i1, i2, j1, j2 = codes[-1]
    if tag == "equal":
        codes[-1] = (tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group

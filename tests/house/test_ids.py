"""Ids: one owner mints them and recognises them when they come back."""

from __future__ import annotations

import pytest

from airlock.ids import id_pattern, new_id


@pytest.mark.parametrize("random_bytes", [5, 10, 16])
def test_the_pattern_recognises_exactly_what_new_id_mints(random_bytes: int) -> None:
    pattern = id_pattern("run_", random_bytes=random_bytes)
    minted = new_id("run_", random_bytes=random_bytes)
    assert pattern.fullmatch(minted)
    assert not pattern.fullmatch(minted + "a")
    assert not pattern.fullmatch(minted[:-1])
    assert not pattern.fullmatch(minted.upper())
    assert not pattern.fullmatch("ses_" + minted[4:])
    assert not pattern.fullmatch(minted[:-1] + "1")  # base32 has no 0, 1, 8 or 9

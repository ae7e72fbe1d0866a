"""The response scrubber on its own: every spelling masked, split anywhere, nothing else.

The reference is the whole stream masked at once (`Scrubber.mask`, which keeps no state);
fed in chunks cut at random places, the scrubber must give exactly the same bytes.
"""

from __future__ import annotations

import random

import pytest

from airlock.egress.scrub import Scrubber, spellings

SECRETS = ("sk-live-Zq9/x+Yv~w%3d", "ghp_0123456789abcdefABCDEF")


def streamed(scrubber: Scrubber, data: bytes, cuts: list[int]) -> bytes:
    out = []
    last = 0
    for cut in [*cuts, len(data)]:
        out.append(scrubber.feed(data[last:cut]))
        last = cut
    out.append(scrubber.flush())
    return b"".join(out)


def test_each_spelling_is_masked_at_every_split_point() -> None:
    for secret in SECRETS:
        for needle in spellings(secret):
            data = b"before " + needle + b" after"
            for cut in range(len(data) + 1):
                out = streamed(Scrubber(SECRETS), data, [cut])
                assert out == b"before " + b"*" * len(needle) + b" after", (needle, cut)


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_split_anywhere_match_masking_the_whole(seed: int) -> None:
    rng = random.Random(seed)
    needles = sorted({n for s in SECRETS for n in spellings(s)})
    # Filler from the spellings' own bytes, with their starts, so ends that could begin a
    # spelling (and must be held back, then released) are common.
    alphabet = bytes(sorted({b for n in needles for b in n[:3]} | set(b' \n"=x')))
    parts = []
    for _ in range(rng.randrange(1, 30)):
        if rng.random() < 0.3:
            parts.append(rng.choice(needles))
        else:
            parts.append(bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))))
        if rng.random() < 0.2:
            needle = rng.choice(needles)
            parts.append(needle[: rng.randrange(1, len(needle))])  # a prefix, not a spelling
    data = b"".join(parts)
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randrange(0, 12))))
    scrubber = Scrubber(SECRETS)
    out = streamed(scrubber, data, cuts)
    assert out == Scrubber(SECRETS).mask(data)
    assert len(out) == len(data)
    for needle in needles:
        assert needle not in out


def test_a_chunk_without_a_spellings_rarest_byte_passes_unchanged_and_unheld() -> None:
    # The fast path: nothing searched, nothing held, the same object handed back.
    scrubber = Scrubber(SECRETS)
    chunk = b"b" * 20_000
    assert scrubber.feed(chunk) is chunk
    assert scrubber.flush() == b""


def test_no_secret_means_no_work() -> None:
    scrubber = Scrubber(())
    assert not scrubber.active
    chunk = b"sk-live-anything"
    assert scrubber.feed(chunk) is chunk

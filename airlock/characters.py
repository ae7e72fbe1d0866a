"""Which characters may not hide in a name or a line shown to a person or a model.

One predicate for every place that refuses or escapes them (hatch names, patch names,
terminal output): Unicode's "C" categories (controls, format characters such as zero-width
and bidi marks and tag characters, private use, surrogates, unassigned) and the line and
paragraph separators, which break a line without looking like a newline.
"""

from __future__ import annotations

import unicodedata

_SEPARATORS = "\u2028\u2029"


def is_invisible(ch: str) -> bool:
    """Whether the single character `ch` is a control or invisible character."""
    return unicodedata.category(ch)[0] == "C" or ch in _SEPARATORS


def has_invisible(text: str) -> bool:
    """Whether any character of `text` is one `is_invisible` names."""
    return any(is_invisible(ch) for ch in text)

"""Which characters may not hide in a name or a line shown to a person or a model.

One source for every place that refuses, escapes or strips them (hatch names, patch names,
workspace names, terminal output, the untrusted-output envelope): Unicode's "C" categories
(controls, format characters such as zero-width and bidi marks and tag characters, private
use, surrogates, unassigned), the line and paragraph separators, which break a line without
looking like a newline, and the marks outside "C" that render as nothing: variation
selectors (a run of U+E0100-U+E01EF after a visible letter spells hidden bytes, one per
selector), the combining grapheme joiner, Mongolian free variation selectors, the Hangul
fillers and Khmer's inherent vowels.
"""

from __future__ import annotations

import re
import unicodedata

_SEPARATORS = "\u2028\u2029"

HIDDEN_MARKS = (
    "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u3164"
    "\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef"
)
"""Invisible characters outside the "C" categories, as the body of a regex character class."""

INVISIBLE_FORMATS = (
    "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
    "\ufff9-\ufffb\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f"
)
"""The format characters ("Cf") that render as nothing (soft hyphen, zero-width, bidi,
interlinear annotation, shorthand and musical format controls, tags), as the body of a regex
character class; the visible ones (Arabic number signs) are left out."""

_HIDDEN = re.compile(f"[{HIDDEN_MARKS}]")


def is_invisible(ch: str) -> bool:
    """Whether the single character `ch` is a control or invisible character."""
    return unicodedata.category(ch)[0] == "C" or ch in _SEPARATORS or _HIDDEN.match(ch) is not None


def has_invisible(text: str) -> bool:
    """Whether any character of `text` is one `is_invisible` names."""
    return any(is_invisible(ch) for ch in text)

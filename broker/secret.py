"""`Secret`: the wrapper every secret value travels in (vault values, run tokens).

Holds one string and shows it only through `reveal()`. Printing, logging, formatting,
comparing or pickling a `Secret` never yields the value, so a value cannot slip into a log
record, an exception message, a repr in a traceback or a test snapshot by accident. Call
`reveal()` at the last moment, at the one place that must put the value on the wire.
"""

from __future__ import annotations

from typing import Any, NoReturn

_MASK = "Secret('***')"


class Secret:
    """A secret string that never shows itself; `reveal()` returns it.

    Equality is identity: two `Secret`s holding the same value are not equal, so an
    assertion or a log line comparing them cannot leak it through a diff. Copies are the
    same object (a `Secret` is immutable); pickling raises TypeError, since a pickle would
    carry the value in the clear.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret wraps a str, not {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The value itself: for the one place that must send it, never for logs or messages."""
        return self._value

    def __repr__(self) -> str:
        return _MASK

    def __str__(self) -> str:
        return _MASK

    def __format__(self, format_spec: str) -> str:
        return format(_MASK, format_spec)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("a Secret cannot be pickled: the pickle would hold its value in the clear")

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled: the pickle would hold its value in the clear")

    def __getstate__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled: the pickle would hold its value in the clear")

"""The base of every policy section, and how a check words what is wrong.

Belongs here: `Section` (frozen, strict, no unknown keys, field docstrings as the JSON
Schema's descriptions), the helpers every section's checks use to raise a problem whose
message is the reason alone (`problem`, `reasoned`, `all_problems`), and `Name`, the name
of a rule, a capability or a hatch root. Not here: any section itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic_core import PydanticCustomError

MIB = 1024 * 1024


class Section(BaseModel):
    # strict: TOML values are already typed, so a quoted number or a boolean where a
    # count belongs is a mistake in the file, not something to coerce.
    # use_attribute_docstrings: the docstring under each field becomes its JSON Schema
    # description, which is what editors show operators.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


def quoted(text: str) -> str:
    """`text` in double quotes, as TOML writes strings, for messages."""
    return json.dumps(text, ensure_ascii=False)


def problem(kind: str, reason: str) -> PydanticCustomError:
    # The reason goes in as context, so braces in it ("{org}") are kept as written.
    return PydanticCustomError(kind, "{reason}", {"reason": reason})


def all_problems(found: list[PydanticCustomError]) -> None:
    """Raise every problem a cross-key check found at once (pydantic stops at one raise);
    `policies.load` lists each of `reasons` on its own line."""
    if len(found) == 1:
        raise found[0]
    if found:
        reasons = [str(each) for each in found]
        raise PydanticCustomError(
            "several_problems", "{reason}", {"reason": "; ".join(reasons), "reasons": reasons}
        )


def reasoned(kind: str, check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`check` with its ValueError turned into a validation error whose message is
    the reason alone (pydantic would otherwise prefix "Value error, ")."""

    def run(value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise problem(kind, str(exc)) from None

    return run


def as_tuple(value: object) -> object:
    # TOML arrays arrive as lists; the model keeps tuples so a validated policy cannot
    # change, and strict mode would refuse the list.
    return tuple(value) if isinstance(value, list) else value


_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{quoted(value)} is not a valid name; use 1 to 63 lower-case letters, digits "
            'and hyphens, starting with a letter or digit, such as "github-read"'
        )
    return value


Name = Annotated[
    str,
    AfterValidator(reasoned("name", _check_name)),
    WithJsonSchema({"type": "string", "pattern": f"^{_NAME.pattern}$"}),
]
"""The name of an egress rule, a capability or a hatch root."""

"""Shapes a baseline file's values are checked by when it is loaded: the value shapes the gate record declares
its fields with (gate/record.py), and the file's own parts that are not a profile record (``recorded``, the control
characters of any text).

Why: a baseline is a file people edit, merge and resolve conflicts in. A field
of the wrong type (``"shares": "abc"``, ``"latency": []``) used to surface as
an ``AttributeError`` deep inside the gate, without the file's name. Checking
every field at load time turns that into one error naming the file, the field
and what it must hold.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pytest_sme2.system.plain_text import CONTROL


@dataclass(frozen=True)
class Leaf:
    """A value ``check`` accepts, described as ``expected`` in the error."""

    check: Callable[[Any], bool]
    expected: str


@dataclass(frozen=True)
class Fields:
    """An object with known keys (each optional), or null when ``nullable``."""

    fields: Mapping[str, Any]
    nullable: bool = False


@dataclass(frozen=True)
class MapOf:
    """An object whose keys are names and whose values all have one shape, or null when ``nullable``."""

    value: Any
    nullable: bool = False


def number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _fraction(x: Any) -> bool:
    return number(x) and -1e-6 <= x <= 1 + 1e-6


def optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: x is None or check(x)


def listed(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, list) and all(check(v) for v in x)


def _text(x: Any) -> bool:
    return isinstance(x, str)


NUMBER = Leaf(optional(number), "a number or null")
COUNT = Leaf(optional(count), "a whole number >= 0 or null")
FRACTION = Leaf(optional(_fraction), "a fraction between 0 and 1, or null")
FLAG = Leaf(lambda x: x is None or isinstance(x, bool), "true, false or null")
TEXT = Leaf(optional(_text), "a string or null")
TEXTS = Leaf(listed(_text), "a list of strings")
SHARE = Leaf(optional(number), "a share (a number, 0.25 for 25%) or null")
SHARES = Leaf(optional(listed(optional(number))), "null or a list of shares, one per run (null for a run without one)")
ANY_OBJECT = Leaf(lambda x: x is None or isinstance(x, dict), "an object or null")


_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?"
)
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
GIT_STATES = ("before the first commit", "outside a git repository")

# When and at which commit a baseline was recorded (baselines.recorded_now); its text reaches every failure message.
RECORDED = Fields(
    {
        "date": Leaf(
            lambda x: isinstance(x, str) and bool(_TIMESTAMP.fullmatch(x)), "a UTC timestamp like 2026-01-31T12:00:00Z"
        ),
        "git_commit": Leaf(
            optional(lambda x: isinstance(x, str) and bool(_COMMIT.fullmatch(x))),
            "a git commit (7 to 64 hexadecimal digits) or null",
        ),
        "git": Leaf(lambda x: x is None or x in GIT_STATES, f"null, {GIT_STATES[0]!r} or {GIT_STATES[1]!r}"),
    },
    nullable=True,
)


def control_character(value: Any, where: str = "") -> str | None:
    """The first string of ``value`` (a value or an object's key, at any depth) holding a control character, as
    ``"<field path> holds a control character ..."``; None when every string is one line of printable text.

    Why every string and not only the fields we print today: a label, an operator or a kernel name from the
    file reaches failure messages, the terminal summary and the CI job summary; refusing it where the file is
    read keeps a later report from printing it raw."""
    if isinstance(value, str):
        found = CONTROL.search(value)
        return (
            None
            if found is None
            else f"{where or 'a value'} holds the control character {found.group()!r} (it is {shown(value)}): text "
            "in a baseline is one line of printable characters, since a line break would forge a line of the "
            "output (under GitHub Actions, a workflow command)"
        )
    if isinstance(value, list):
        items = ((f"{where}[{i}]", item) for i, item in enumerate(value))
    elif isinstance(value, dict):
        for key in value:
            if isinstance(key, str) and CONTROL.search(key):
                return control_character(key, f"a key of {where or 'the file'}")
        items = (
            (f"{where}.{key}" if where and key.isidentifier() else f"{where}[{key!r}]" if where else key, item)
            for key, item in value.items()
        )
    else:
        return None
    return next((found for path, item in items for found in [control_character(item, path)] if found), None)


def problem(value: Any, spec: Any, where: str) -> str | None:
    """The first field of ``value`` that does not have the shape ``spec`` describes, as
    ``"<field path> must be <expected> (it is <what it is>)"``; None when all is well."""
    if isinstance(spec, Leaf):
        return None if spec.check(value) else f"{where} must be {spec.expected} (it is {shown(value)})"
    if value is None and spec.nullable:
        return None
    if not isinstance(value, dict):
        kind = "an object of named values" if isinstance(spec, MapOf) else "an object"
        return f"{where} must be {kind}{' or null' if spec.nullable else ''} (it is {shown(value)})"
    if isinstance(spec, MapOf):
        items = [(f"{where}[{key!r}]", item, spec.value) for key, item in value.items()]
    else:
        items = [(f"{where}.{key}", value[key], sub) for key, sub in spec.fields.items() if key in value]
    for path, item, sub in items:
        found = problem(item, sub, path)
        if found:
            return found
    return None


def shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"

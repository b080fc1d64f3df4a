"""How a declared record is read from JSON, written back and checked, from its declaration alone.

Why a module of its own: the gate record (gate/record.py) is declared once, as frozen dataclasses whose fields
carry their shape; reading a baseline or a summary into it, writing it back and refusing a damaged file by field
all walk that one declaration here, so a field the declaration has is always checked and none is listed twice.

A record part is a frozen dataclass subclassing :class:`Part`; each field is made by :func:`declared`, with its
shape: a :class:`~pytest_sme2.gate.baseline_schema.Leaf` (a value), a :class:`~pytest_sme2.gate.baseline_schema.MapOf`
(names to one shape) or an :class:`Object` (a Part: an object of known fields).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from pytest_sme2.gate.baseline_schema import Leaf, MapOf, shown

ALWAYS = "always"  # written as null when None
WHEN_SET = "when set"  # left out when None (a record without instructions has no "instructions" key)

P = TypeVar("P", bound="Part")


@dataclasses.dataclass(frozen=True)
class Object:
    """A field holding a Part (an object of known fields), or null when ``nullable``."""

    part: type[Part]
    nullable: bool = True


def declared(
    shape: Any,
    doc: str,
    *,
    required: bool = False,
    written: str = ALWAYS,
    kept: bool = False,
    empty: Callable[[], Any] | None = None,
) -> Any:
    """A record field: its shape (what load accepts), what it means (``doc``), whether a file must have it,
    whether it is written as null or left out when None, and ``kept``: taken as the profile's one JSON form
    (Profile.to_dict) has it under the same name. Its value when not given is None, or ``empty()`` (a required
    list or map: a synthetic record of a test names only what it judges)."""
    metadata = {"shape": shape, "doc": doc, "written": written, "kept": kept, "required": required}
    if empty is not None:
        return dataclasses.field(default_factory=empty, metadata=metadata)
    return dataclasses.field(default=None, metadata=metadata)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Part:
    """A typed object of a record. ``present``: the keys of the JSON it was read from (None: built here, every
    field written), so a record read and written again keeps the keys it had, no more."""

    WHAT: ClassVar[str] = "an object"  # what a value of the wrong type must be instead
    NAME: ClassVar[str] = "a record's object"  # how an unknown field's error names the part
    present: frozenset[str] | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def declared_fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The declared fields, in declaration order (``present`` is bookkeeping, not a field of the JSON)."""
        return tuple(f for f in dataclasses.fields(cls) if "shape" in f.metadata)

    @classmethod
    def from_json(cls: type[P], data: Mapping[str, Any]) -> P:
        """The part as a JSON object holds it (checked or not: ``problem`` says what is wrong first)."""
        values = {
            f.name: read_value(data[f.name], f.metadata["shape"]) for f in cls.declared_fields() if f.name in data
        }
        return cls(**values, present=frozenset(data))

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this part: the keys it was read with, or every field (a ``WHEN_SET`` one only when
        it holds a value)."""
        out: dict[str, Any] = {}
        for f in self.declared_fields():
            value = getattr(self, f.name)
            if self.present is not None:
                if f.name not in self.present:
                    continue
            elif value is None and f.metadata["written"] == WHEN_SET:
                continue
            out[f.name] = write_value(value, f.metadata["shape"])
        return out

    @classmethod
    def problem(cls, data: Any, where: str, nullable: bool = True) -> str | None:
        """The first thing wrong with ``data`` as this part, as ``"<field path> ..."``: not an object, a required
        field missing, a field of the wrong shape, a field the declaration does not have; None when all is well."""
        if data is None and nullable:
            return None
        if not isinstance(data, dict):
            return f"{where} must be {cls.WHAT}{' or null' if nullable else ''} (it is {shown(data)})"
        known = cls.declared_fields()
        for f in known:
            if f.metadata["required"] and f.name not in data:
                return f"{where} has no {f.name!r}"
        for f in known:
            if f.name in data:
                wrong = value_problem(data[f.name], f.metadata["shape"], f"{where}.{f.name}")
                if wrong:
                    return wrong
        names = {f.name for f in known}
        unknown = [key for key in data if key not in names]
        if unknown:
            return (
                f"{where} has {unknown[0]!r}, which is no field of {cls.NAME} (pytest_sme2/gate/record.py "
                f"declares them): remove it, or, if a newer pytest-sme2 wrote it, "
                f"update pytest-sme2"
            )
        return None


def read_value(value: Any, shape: Any) -> Any:
    """A JSON value as the record holds it: a Part's object as that Part, a map's values each read."""
    if value is None:
        return None
    if isinstance(shape, Object):
        return shape.part.from_json(value) if isinstance(value, Mapping) else value
    if isinstance(shape, MapOf) and isinstance(value, Mapping):
        return {key: read_value(item, shape.value) for key, item in value.items()}
    return value


def write_value(value: Any, shape: Any) -> Any:
    """A record's value as JSON (the inverse of read_value)."""
    if isinstance(value, Part):
        return value.to_json()
    if isinstance(shape, MapOf) and isinstance(value, Mapping):
        return {key: write_value(item, shape.value) for key, item in value.items()}
    return value


def value_problem(value: Any, shape: Any, where: str) -> str | None:
    """What is wrong with one field's value, as ``"<field path> must be <expected> (it is <what it is>)"``."""
    if isinstance(shape, Leaf):
        return None if shape.check(value) else f"{where} must be {shape.expected} (it is {shown(value)})"
    if isinstance(shape, Object):
        return shape.part.problem(value, where, shape.nullable)
    if value is None and shape.nullable:
        return None
    if not isinstance(value, dict):
        return f"{where} must be an object of named values{' or null' if shape.nullable else ''} (it is {shown(value)})"
    for key, item in value.items():
        wrong = value_problem(item, shape.value, f"{where}[{key!r}]")
        if wrong:
            return wrong
    return None

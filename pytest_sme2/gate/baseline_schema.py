"""The shape of a stored baseline record, checked field by field when a file is loaded.

Why: a baseline is a file people edit, merge and resolve conflicts in. A field
of the wrong type (``"shares": "abc"``, ``"latency": []``) used to surface as
an ``AttributeError`` deep inside the gate, without the file's name. Checking
every field the gate or a report reads, at load time, turns that into one
error naming the file, the field and what it must hold. Fields are optional
unless listed as required (files from older versions lack newer ones), but a
field that is present must have its documented shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pytest_sme2.export.graph_nodes import WEIGHTS_CHARS
from pytest_sme2.system.plain_text import CONTROL

REQUIRED = ("latency", "samples_ms", "shares")


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


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _fraction(x: Any) -> bool:
    return _number(x) and -1e-6 <= x <= 1 + 1e-6


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: x is None or check(x)


def _list(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, list) and all(check(v) for v in x)


def _startup_value(x: Any) -> bool:
    """A runner process's load or init: a number >= 0, or null where every warm load of it was disturbed."""
    return x is None or (_number(x) and x >= 0)


def _startup_leaf(event: str, relative: bool) -> Leaf:
    """A start-up list of a record: one value per runner process, null where every warm load was disturbed."""
    what = (
        f"{event} per runner process, relative to the reference program's load"
        if relative
        else f"ms of {event} per runner process"
    )
    return Leaf(
        _optional(_list(_startup_value)),
        f"null or a list of numbers >= 0 ({what}; null: every warm load of that process was disturbed)",
    )


def _text(x: Any) -> bool:
    return isinstance(x, str)


_WEIGHTS_DIGEST = re.compile(rf"[0-9a-f]{{{WEIGHTS_CHARS}}}")


def _graph_node(x: Any) -> bool:
    """[node name, delegated, dtype or null, shape or null, weights digest or null, operator name]
    (export/graph_nodes.py); a record of a pytest-sme2 before export format 5 has the first four only, one before
    export format 6 the first five."""
    return (
        isinstance(x, list)
        and len(x) in (4, 5, 6)
        and (len(x) < 6 or isinstance(x[5], str))
        and isinstance(x[0], str)
        and isinstance(x[1], bool)
        and (x[2] is None or isinstance(x[2], str))
        and (x[3] is None or _list(_count)(x[3]))
        and (len(x) == 4 or x[4] is None or (isinstance(x[4], str) and _WEIGHTS_DIGEST.fullmatch(x[4]) is not None))
    )


NUMBER = Leaf(_optional(_number), "a number or null")
COUNT = Leaf(_optional(_count), "a whole number >= 0 or null")
FRACTION = Leaf(_optional(_fraction), "a fraction between 0 and 1, or null")
FLAG = Leaf(lambda x: x is None or isinstance(x, bool), "true, false or null")
TEXT = Leaf(_optional(_text), "a string or null")
TEXTS = Leaf(_list(_text), "a list of strings")
SHARE = Leaf(_optional(_number), "a share (a number, 0.25 for 25%) or null")
SHARES = Leaf(
    _optional(_list(_optional(_number))), "null or a list of shares, one per run (null for a run without one)"
)
ANY_OBJECT = Leaf(lambda x: x is None or isinstance(x, dict), "an object or null")

_LATENCY = Leaf(
    lambda x: x is None or (isinstance(x, dict) and all(_optional(_number)(v) for v in x.values())),
    'null or an object of statistics (numbers), e.g. {"median_ms": 1.2, ...}',
)

_INSTRUCTIONS = Fields(
    {
        "source": TEXT,
        "per_inference": NUMBER,
        "sme_per_inference": NUMBER,
        "sme_share_of_conv_gemm": FRACTION,
        "shares": MapOf(SHARE, nullable=True),
        "delegation_coverage": FRACTION,
        "sme_path_share": FRACTION,
        "sme_path_basis": TEXT,
        "ops": MapOf(
            Leaf(
                lambda x: isinstance(x, list) and len(x) == 3 and all(_count(v) for v in x),
                "[execution order, instructions, SME instructions], three whole numbers >= 0",
            ),
            nullable=True,
        ),
        "sme_kernels": TEXTS,
        # op id -> its graph node's name (identity.py); absent in records of older pytest-sme2
        "op_identity": MapOf(Leaf(_text, "a string"), nullable=True),
        # instruction class (instruction_classes.py) -> instructions of one inference; absent in older records
        "mix": MapOf(Leaf(_count, "a whole number >= 0"), nullable=True),
    },
    nullable=True,
)

# Modelled device time of a counted run (--sme2-device): absent where no device was modelled
_MODELLED = Fields(
    {
        "device": TEXT,
        "option": TEXT,  # the --sme2-device value that selects it again (a name, or a device file's path)
        "pricing_digest": TEXT,
        "validation": TEXT,
        "refused": TEXT,  # why the model refused this profile (then no numbers)
        "e2e_ms": NUMBER,
        "category_ms": MapOf(NUMBER, nullable=True),
        "ops": MapOf(NUMBER, nullable=True),  # op id (as in instructions.ops) -> modelled ms
    },
    nullable=True,
)

PROFILE = Fields(
    {
        "model": TEXT,
        "recipe": TEXT,
        "variant": TEXT,
        "emulated": FLAG,
        "basis": TEXT,
        "latency": _LATENCY,
        "samples_ms": Leaf(_list(lambda x: _number(x) and x >= 0), "a list of numbers >= 0 (ms per run)"),
        "reference_ms": Leaf(
            _optional(_list(lambda x: _number(x) and x > 0)),
            "null or a list of numbers > 0 (ms of the reference program before each run)",
        ),
        "disturbed_runs": COUNT,
        "chunk_sizes": Leaf(_optional(_list(_count)), "null or a list of runs per runner process (whole numbers >= 0)"),
        **{
            f"{check}_{kind}_per_chunk": _startup_leaf(event, relative=kind == "relative")
            for check, event in (("load", "Program::load_method"), ("init", "Method::init"))
            for kind in ("ms", "relative")
        },
        "disturbed_run_indices": Leaf(_optional(_list(_count)), "null or a list of run indices (whole numbers >= 0)"),
        "disturbed_references": COUNT,
        "shares": MapOf(SHARE),
        "per_run": Fields(
            {"shares": MapOf(SHARES, nullable=True), "delegation_coverage": SHARES, "sme_path_share": SHARES},
            nullable=True,
        ),
        "delegation_coverage": FRACTION,
        "node_delegation_coverage": FRACTION,
        "delegation": Fields(
            {
                "delegated_nodes": COUNT,
                "non_delegated_nodes": COUNT,
                "ops": MapOf(
                    Leaf(
                        lambda x: isinstance(x, list) and len(x) == 2 and all(_count(v) for v in x),
                        "[delegated, not delegated], two whole numbers >= 0",
                    ),
                    nullable=True,
                ),
                # graph nodes in order (export/graph_nodes.py); absent in records of older pytest-sme2
                "nodes": Leaf(
                    _optional(_list(_graph_node)),
                    "null or a list of [node name, delegated, dtype or null, shape or null, weights digest (16 "
                    "hex characters) or null, operator name]; records written before export format 5 have no "
                    "weights digest, before export format 6 no operator name",
                ),
            },
            nullable=True,
        ),
        "portable_ops": TEXTS,
        "sme_path_share": FRACTION,
        "sme_path_ops": COUNT,
        "memory": Fields(
            {
                "planned_bytes": COUNT,
                "planned_buffers": Leaf(_optional(_list(_count)), "null or a list of buffer sizes in bytes"),
                "peak_rss_kb": Leaf(
                    _optional(_list(_count)), "null or a list of the runner's peak resident KiB per run"
                ),
            },
            nullable=True,
        ),
        "run": ANY_OBJECT,
        "provenance": ANY_OBJECT,
        "instructions": _INSTRUCTIONS,
        "modelled": _MODELLED,
        "kernel_time": MapOf(Fields({"samples": COUNT, "kernels": MapOf(FRACTION)}), nullable=True),
        "quality": ANY_OBJECT,
    }
)


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
            _optional(lambda x: isinstance(x, str) and bool(_COMMIT.fullmatch(x))),
            "a git commit (7 to 64 hexadecimal digits) or null",
        ),
        "git": Leaf(lambda x: x is None or x in GIT_STATES, f"null, {GIT_STATES[0]!r} or {GIT_STATES[1]!r}"),
    },
    nullable=True,
)


def record_problem(record: Any, where: str) -> str | None:
    """What is wrong with one profile record (a baseline file's, or the one a session kept in its summary.json for
    ``pytest-sme2 check``), as ``"<field path> ..."``; None when the gate can judge it. One check for both: a
    NaN or infinite number in either would turn a verdict into an improvement or an inconclusive pass."""
    if not isinstance(record, dict):
        return f"{where} must be an object (it is {_shown(record)})"
    for key in REQUIRED:
        if key not in record:
            return f"{where} has no {key!r}"
    wrong = problem(record, PROFILE, where)
    if wrong:
        return wrong
    samples, reference = record["samples_ms"], record.get("reference_ms")
    if not (samples or record.get("emulated")):
        return f"{where}.samples_ms is empty (only an emulated record has no timed runs)"
    if reference is not None and len(reference) != len(samples):
        return (
            f"{where}.reference_ms has {len(reference)} entries, one per entry of 'samples_ms' ({len(samples)}) "
            f"expected"
        )
    return None


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
            else f"{where or 'a value'} holds the control character {found.group()!r} (it is {_shown(value)}): text "
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
        return None if spec.check(value) else f"{where} must be {spec.expected} (it is {_shown(value)})"
    if value is None and spec.nullable:
        return None
    if not isinstance(value, dict):
        kind = "an object of named values" if isinstance(spec, MapOf) else "an object"
        return f"{where} must be {kind}{' or null' if spec.nullable else ''} (it is {_shown(value)})"
    if isinstance(spec, MapOf):
        items = [(f"{where}[{key!r}]", item, spec.value) for key, item in value.items()]
    else:
        items = [(f"{where}.{key}", value[key], sub) for key, sub in spec.fields.items() if key in value]
    for path, item, sub in items:
        found = problem(item, sub, path)
        if found:
            return found
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"

"""The gate's types: how much change is allowed (Tolerances) and what one check found (Verdict).

A verdict is typed from the check that makes it to the report that shows it: its status is a ``Status``, its
numbers an ``Evidence``, and it crosses process boundaries (xdist, summary.json) as the plain dict of
``Verdict.as_dict``, read back with ``Verdict.from_dict``. Its text (``str(verdict)``, ``message``) is for people
only: nothing reads a status, a device or a reason back out of it. Which names ``Verdict.check`` takes is the
registry's (gate/checks/__init__.py, ``CHECK_NAMES``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any

from pytest_sme2.errors import UsageError

METRICS = ("latency", "instructions")

# How far an unchanged program's relative latency (sd, relative) and its shares (sd, points) move between
# sessions beyond the spread of one session's replicas. Measured by benchmarks/session_spread.py over the
# false-alarm study's calibration sessions on a shared 2-core x86_64 VM (2026-11-29 04:19-05:16, host and local,
# idle and beside one or two busy jobs, 5-11 sessions each): at most 2.26% and 0.71 points for mobilenet_v3_small,
# mynet and transformer_encoder; toy_cnn (0.1 ms a run) moved up to 4.35% and 3.5 points, where min_effect_ms
# decides first. Set a little above the larger models' largest (docs/gate.md, "What every time-based verdict
# allows for").
SESSION_LATENCY = 0.025
SESSION_SHARES = 0.01


class Status(str, Enum):
    """What a check concluded. A str so a status compares with its word and is written as it."""

    OK = "ok"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    SKIPPED = "skipped"  # the check could not apply (a quantity one side lacks); the message says why
    INCONCLUSIVE = "inconclusive"  # too few undisturbed runs or replicas to judge: shown, never failed
    NOTE = "note"  # explains a change without failing (provenance, the person's change, an advisory)
    MISSING = "missing"  # a quantity the gate needs is absent: fails, since nothing can be judged without it

    @property
    def failed(self) -> bool:
        return self in (Status.REGRESSION, Status.MISSING)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Kind(str, Enum):
    """What a verdict is about, as the findings (findings.py) group it: the check decides, never its wording."""

    QUANTITY = "quantity"  # an amount, measured or counted, against its tolerance
    OPERATORS = "operators"  # the program's operators changed (some gone, some new)
    KERNEL_PATH = "kernel_path"  # an operator, or the program, lost the SME kernels it ran in the baseline
    CONTEXT = "context"  # how the comparison was made (operators paired by execution order)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, eq=False)
class Evidence(Mapping[str, Any]):
    """The numbers behind one verdict, by name (each check's own: ``current``, ``baseline``, ``ratio``, ``p``, ...),
    and the typed facts the gate reads after the check: ``kind`` (how findings group it), ``category`` (a share's
    operator category), ``statistical`` (a significance test decided it, so a noisy baseline can mislead it) and
    ``short`` (what moved, in a few words, as a failing test's message lists it: "planned memory +12.0%"; the
    check words it, findings.py shows it; None: the message is shown).

    It reads as a mapping of its numbers, so ``evidence["ratio"]`` and ``"op" in evidence`` are the numbers'.
    """

    numbers: Mapping[str, Any] = field(default_factory=dict)
    kind: Kind = Kind.QUANTITY
    category: str | None = None
    statistical: bool = False
    short: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.numbers[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.numbers)

    def __len__(self) -> int:
        return len(self.numbers)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Evidence):
            return (dict(self.numbers), self.kind, self.category, self.statistical, self.short) == (
                dict(other.numbers),
                other.kind,
                other.category,
                other.statistical,
                other.short,
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # its numbers are a mutable mapping

    def with_numbers(self, **more: Any) -> Evidence:
        """The same evidence with more numbers (a note saying what explains it)."""
        return replace(self, numbers={**self.numbers, **more})

    def worded(self, short: str | None) -> Evidence:
        """The same evidence with its few words (``short``)."""
        return replace(self, short=short)

    def as_dict(self) -> dict[str, Any]:
        return {
            "numbers": _plain(dict(self.numbers)),
            "kind": self.kind.value,
            "category": self.category,
            "statistical": self.statistical,
            "short": self.short,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            dict(data.get("numbers") or {}),
            Kind(data.get("kind", Kind.QUANTITY.value)),
            data.get("category"),
            bool(data.get("statistical", False)),
            data.get("short"),
        )


@dataclass(frozen=True)
class Verdict:
    """One check of one profile against its baseline."""

    check: str  # one of the registered checks' names (gate/checks/__init__.py, CHECK_NAMES)
    status: Status
    label: str  # the profile's label: model, recipe and variant
    message: str
    evidence: Evidence = field(default_factory=Evidence)

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):  # a status word ("ok") is read as its Status, or refused by name
            object.__setattr__(self, "status", Status(self.status))
        if not isinstance(self.evidence, Evidence):
            raise TypeError(
                f"verdict {self.check!r}: evidence must be an Evidence, not {type(self.evidence).__name__} "
                f"(wrap its numbers: Evidence({{...}}))"
            )

    @property
    def failed(self) -> bool:
        return self.status.failed

    def __str__(self) -> str:
        return f"[{self.status}] {self.label}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data (str, numbers, lists, dicts): what crosses to the xdist controller and into JSON."""
        return {
            "check": self.check,
            "status": self.status.value,
            "label": self.label,
            "message": self.message,
            "evidence": self.evidence.as_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict written by ``as_dict``; a wrong shape is a UsageError naming the field."""
        try:
            return cls(
                str(data["check"]),
                Status(data["status"]),
                str(data["label"]),
                str(data["message"]),
                Evidence.from_dict(data.get("evidence") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"a stored verdict is incomplete or damaged ({type(exc).__name__}: {exc}); "
                f"run the session again to write it anew"
            ) from None


def _plain(value: Any) -> Any:
    """``value`` as JSON-like plain data: numpy scalars as Python numbers, tuples and arrays as lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (bool, str)) or value is None:
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _plain(value.tolist())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


@dataclass(frozen=True)
class Tolerances:
    """How much change is allowed before a verdict fails.

    ``latency``, ``instructions``, ``op_instructions`` (one operator's counted instructions, emulated
    target), ``modelled`` (modelled device time end to end, emulated target with a device model) and
    ``memory`` (the program's planned memory; exact, so 0 by default), ``load`` and ``init``
    (Program::load_method and Method::init: per runner process on the local and adb targets, counted
    instructions on the emulated target) and ``peak_rss`` (the runner's peak resident memory per run,
    hardware) are relative (0.10 = 10% slower);
    ``shares``, ``coverage`` and ``sme_path`` are absolute share points
    (0.05 = five percentage points); ``alpha`` is the significance level
    of every per-run test; ``min_effect_ms`` is the smallest change of the
    median latency in milliseconds that can fail a test, and of a share
    (its points times the baseline's median run): for a model of tens
    of microseconds a relative tolerance alone is a few microseconds, less
    than where a fresh process happens to place its memory moves it.

    ``session_latency`` (relative) and ``session_shares`` (points, for shares, coverage and the SME path share)
    are not allowances for change but how far an unchanged program's level moves between sessions on a
    hardware target beyond its replicas' spread (sd): a baseline's replicas are measured back to back in
    one minute, a check runs later beside other work. Every t-test of these quantities allows for it
    (stats.ReplicaShift.session); the defaults are what the false-alarm study measured on a shared 2-core
    VM (docs/gate.md, "Between sessions"); set them from your own machine's sessions.
    """

    latency: float = 0.10
    op_instructions: float = 0.02
    memory: float = 0.0
    min_effect_ms: float = 0.02
    shares: float = 0.05
    coverage: float = 0.02
    sme_path: float = 0.05
    alpha: float = 0.001
    instructions: float = 0.005
    modelled: float = 0.02
    # Relative start-up moved by up to 24% between a baseline's session and later unchanged ones on the local
    # target, where a doubled init is +94-115% (benchmarks/results/notebook.md, "Load and init relative to the
    # reference load")
    load: float = 0.40
    init: float = 0.40
    peak_rss: float = 0.10
    session_latency: float = SESSION_LATENCY
    session_shares: float = SESSION_SHARES

    def __post_init__(self) -> None:
        bad = []  # every wrong value at once: fixing one at a time costs a run each
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                bad.append(f"{f.name}={value!r} (use a number >= 0)")
            elif f.name == "alpha" and not 0 < value < 1:
                bad.append(f"alpha={value!r} (use a p-value between 0 and 1)")
        if bad:
            raise UsageError(
                f"baseline tolerance{'s' if len(bad) > 1 else ''} {', '.join(bad)} "
                f"{'are' if len(bad) > 1 else 'is'} invalid"
            )

    def replace(self, **changes: Any) -> Tolerances:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise UsageError(f"unknown baseline tolerance(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return Tolerances(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

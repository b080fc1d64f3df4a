"""Modelled device time: what an emulated run's exact counts would cost on a real SME2 CPU.

Why a model: the emulated target counts instructions exactly, but one SME2 FMOPA does 256 fp32
multiply-accumulates and a NEON FMLA 4, so an instruction ratio is no speedup. A device file
(``devices/NAME.toml``, every number with its source) gives each instruction class a throughput on
one of the device's resources and the memory bandwidths; an operator's modelled time is that of its
busiest resource, or of its bytes when memory is slower (docs/device_model.md has the equations):

    t(op) = max( max_r sum_{c on r} n_c(op) / rate_c ,  bytes_read / load_bw + bytes_written / store_bw )

Deterministic: the same counts give the same times on every machine. It is a model, not a
measurement; each result says which device file it came from and how far that file is validated.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np
import pandas as pd

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import Category
from pytest_sme2.evidence.instruction_classes import NAMES
from pytest_sme2.system.plain_text import CONTROL
from pytest_sme2.system.regular_files import DEVICE_FILE, read_bytes
from pytest_sme2.system.toml_reader import tomllib

DEVICES_FOLDER = Path(__file__).parent / "devices"
ALL_CLASSES = "all"  # a resource rate that applies to every instruction class (the pipeline width)
MEMORY = "memory"  # the bound name of an operator whose bytes take longer than its instructions
# The version of the equations (docs/device_model.md): times priced by another are not compared (pricing_digest).
# 2: the share of an operator's bytes that fits in L2 at L2 rates, the rest at DRAM rates (1: all of
# them at DRAM rates once they did not all fit). Raise it with any change of what prices a count, the equations
# here or the bytes work.py gives each operator: baselines priced before then say to record them again.
PRICING_METHOD = 2
MEMORY_KEYS = ("l2_bytes", "l2_load_gb_per_s", "l2_store_gb_per_s", "dram_load_gb_per_s", "dram_store_gb_per_s")
# The physical range of each number, so every modelled time is finite (a rate of 1e-320 has an infinite
# reciprocal, which then no baseline can store) and a typo of a few orders of magnitude is refused:
# (lowest, highest, why), the why shown in the error.
SVL_BITS = (128, 2048, "the architecture's streaming vector lengths: a power of two from 128 to 2048 bits")
THREADS = (1, 1024, "as --sme2-threads: no CPU has more than a few hundred cores")
RATE = (1e-6, 1e4, "instructions per ns or per cycle: from one per millisecond to a core ten thousand wide")
CLOCK_GHZ = (0.01, 20.0, "GHz: no CPU core is clocked outside it")
L2_BYTES = (1, 1 << 40, "bytes: 1 TiB is more than any cache")
BANDWIDTH = (1e-3, 1e6, "GB/s: from 1 MB/s to a million GB/s, past any memory")


@dataclass(frozen=True)
class Resource:
    """One resource of a device: instructions per nanosecond per instruction class it executes."""

    name: str
    what: str
    per_ns: Mapping[str, float]  # class name (or ALL_CLASSES) -> instructions per ns
    sources: Mapping[str, str]

    def ns_per_instruction(self) -> np.ndarray:
        """Nanoseconds one instruction of each class of NAMES takes on this resource (0: not on it)."""
        if ALL_CLASSES in self.per_ns:
            return np.full(len(NAMES), 1.0 / self.per_ns[ALL_CLASSES])
        return np.array([1.0 / self.per_ns[n] if n in self.per_ns else 0.0 for n in NAMES])


@dataclass(frozen=True)
class DeviceModel:
    """A device file, checked: its resources, memory bandwidths and where every number came from."""

    name: str
    description: str
    svl_bits: int
    threads: int
    validation: str
    resources: tuple[Resource, ...]
    memory: Mapping[str, float]
    path: str = ""
    given: str = ""  # as the user named it (--sme2-device, ini sme2_device): what advice to use it again repeats

    @property
    def option(self) -> str:
        """The ``--sme2-device`` value that selects this model again: a shipped device's name, else the device
        file as it was given (a path relative to the rootdir stays so: portable between clones)."""
        if self.given:
            return self.given
        return self.name if not self.path or Path(self.path).parent == DEVICES_FOLDER else self.path

    @property
    def label(self) -> str:
        return f"modelled on {self.name} ({self.validation})"

    @property
    def pricing_digest(self) -> str:
        """The SHA-256 of every number that prices instructions (vector length, threads, rates, memory), not of
        the texts beside them: two baselines' modelled times are comparable exactly when this is equal, so a
        corrected source text leaves them comparable and a changed rate does not."""
        numbers = {
            "svl_bits": self.svl_bits,
            "threads": self.threads,
            "memory": dict(sorted(self.memory.items())),
            "resources": [[r.name, dict(sorted(r.per_ns.items()))] for r in self.resources],
        }
        if PRICING_METHOD > 1:  # the equations that turn the numbers into time (method 1's digests stay as they were)
            numbers["method"] = PRICING_METHOD
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()

    def memory_ns(self, bytes_read: np.ndarray, bytes_written: np.ndarray) -> np.ndarray:
        """Per operator, the time its bytes take (NaN bytes: 0): the share of them that fits in L2 at L2 rates,
        the rest at DRAM rates. Continuous in the bytes: with a step at ``l2_bytes`` (every byte at DRAM rates
        once they did not all fit) a layer 0.4% wider was modelled 5.9x slower."""
        read = np.nan_to_num(np.asarray(bytes_read, dtype=float))
        written = np.nan_to_num(np.asarray(bytes_written, dtype=float))
        total = read + written
        in_l2 = np.divide(self.memory["l2_bytes"], total, out=np.ones_like(total), where=total > 0).clip(max=1.0)
        at_l2 = read / self.memory["l2_load_gb_per_s"] + written / self.memory["l2_store_gb_per_s"]
        at_dram = read / self.memory["dram_load_gb_per_s"] + written / self.memory["dram_store_gb_per_s"]
        return in_l2 * at_l2 + (1 - in_l2) * at_dram  # GB/s is bytes per ns

    def op_ns(self, mix: np.ndarray, bytes_read: np.ndarray, bytes_written: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Per row of ``mix`` (instructions per class of NAMES), the modelled ns and the name of what bounds it."""
        mix = np.atleast_2d(np.asarray(mix, dtype=float))
        per_resource = np.column_stack(
            [mix @ r.ns_per_instruction() for r in self.resources] + [self.memory_ns(bytes_read, bytes_written)]
        )
        names = [r.name for r in self.resources] + [MEMORY]
        busiest = per_resource.argmax(axis=1)
        return per_resource.max(axis=1), [names[i] for i in busiest]


def available_devices() -> list[str]:
    """The device files pytest-sme2 ships (names for ``Profile.modelled``)."""
    return sorted(p.stem for p in DEVICES_FOLDER.glob("*.toml"))


def load_device(name_or_path: str | Path) -> DeviceModel:
    """A shipped device by name (``apple-m4``) or a device file by path, checked field by field."""
    __tracebackhide__ = True
    text = str(name_or_path)
    given_as_path = is_device_path(text)
    path = Path(text) if given_as_path else DEVICES_FOLDER / f"{text}.toml"
    if not path.exists() or path.is_dir():
        if given_as_path:
            near = (
                difflib.get_close_matches(path.name, [f.name for f in path.parent.glob("*.toml")], n=1)
                if path.parent.is_dir()
                else []
            )
            raise UsageError(
                f"no device file at {path.absolute()}{' (a folder)' if path.is_dir() else ''}"
                f"{f' (did you mean {path.parent / near[0]}?)' if near else ''}: give the path of a "
                f"device file (relative paths in --sme2-device and ini sme2_device are from the "
                f"rootdir), or a shipped name: {', '.join(available_devices())}"
            )
        raise UsageError(
            f"no device model {text!r}: pytest-sme2 ships {', '.join(available_devices())}; "
            f"or give the path of a device file ending in .toml (docs/device_model.md says how to "
            f"write one)"
        )
    try:
        data = tomllib.loads(read_bytes(path, DEVICE_FILE).decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"device file {path} cannot be read: {e}") from None
    return _checked(data, path)


def is_device_path(text: str) -> bool:
    """Whether a --sme2-device value names a file (a .toml name, or any path with a folder in it) rather than a
    shipped device: "devices/mydev.tml" is a misspelt file, not a device called that."""
    return text.endswith(".toml") or "/" in text or os.sep in text


def device_of(device: "str | Path | DeviceModel") -> DeviceModel:
    """``device`` itself when it is a DeviceModel already (the plugin reads --sme2-device once, at configure),
    else the shipped device or device file it names (load_device)."""
    __tracebackhide__ = True
    return device if isinstance(device, DeviceModel) else load_device(device)


@dataclass(frozen=True)
class _DeviceFile:
    """The checks of one device file's fields: each raises a UsageError naming the file and the field."""

    path: Path

    def fail(self, what: str) -> UsageError:
        """The error for a wrong field, naming the file and the format's page."""
        return UsageError(f"device file {self.path}: {what} (docs/device_model.md describes the format)")

    def number(self, value: Any, where: str, bounds: tuple[float, float, str]) -> float:
        """A positive, finite number within ``bounds`` (low, high, why)."""
        low, high, why = bounds
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
            or not low <= value <= high
        ):
            raise self.fail(f"{where} must be a positive number from {low:g} to {high:g} ({why}), not {value!r}")
        return float(value)

    def whole(self, value: Any, where: str, bounds: tuple[float, float, str]) -> int:
        """A number of ``number`` that is whole."""
        checked = self.number(value, where, bounds)
        if checked != int(checked):  # int() would make threads = 0.5 a device of no threads
            raise self.fail(f"{where} must be a whole number, not {value!r}")
        return int(checked)

    def text(self, value: Any, where: str) -> str:
        """A non-empty line of printable text."""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{where} must be a non-empty text")
        if CONTROL.search(value):  # the name and validation reach every label and failure message
            raise self.fail(f"{where} must be one line of printable text, not {value!r}")
        return value

    def sourced(self, table: Mapping[str, Any], key: str, where: str) -> str:
        """The source ``table`` gives for ``key``: every number needs one."""
        sources = table.get("source")
        source = sources.get(key) if isinstance(sources, dict) else None
        if not isinstance(source, str) or not source.strip():
            raise self.fail(f'{where} has no source; every number needs one (source.{key} = "...")')
        return self.text(source, f"source.{key} of {where}")


def _checked(data: dict[str, Any], path: Path) -> DeviceModel:
    """The DeviceModel of a device file's contents; a UsageError naming the file and the field otherwise."""
    f = _DeviceFile(path)
    for key in ("name", "description", "validation"):
        f.text(data.get(key), f"'{key}'")
    svl = f.whole(data.get("svl_bits"), "svl_bits", SVL_BITS)
    if svl & (svl - 1):
        raise f.fail(f"svl_bits must be a power of two ({SVL_BITS[2]}), not {svl}")
    f.sourced(data, "svl_bits", "svl_bits")
    threads = f.whole(data.get("threads"), "threads", THREADS)
    f.sourced(data, "threads", "threads")
    resources = _resources(data, f)
    memory_table = data.get("memory") or {}
    # l2_bytes a whole number of bytes, kept as a float like the bandwidths: the pricing digest of every
    # baseline priced so far hashed it that way
    memory = {
        key: float(f.whole(memory_table.get(key), f"memory.{key}", L2_BYTES))
        if key == "l2_bytes"
        else f.number(memory_table.get(key), f"memory.{key}", BANDWIDTH)
        for key in MEMORY_KEYS
    }
    for key in MEMORY_KEYS:
        f.sourced(memory_table, key, f"memory.{key}")
    model = DeviceModel(
        data["name"], data["description"], svl, threads, data["validation"], tuple(resources), memory, str(path)
    )
    shipped = DEVICES_FOLDER / f"{model.name}.toml"
    if (
        path.resolve() != shipped.resolve()
        and shipped.is_file()
        and load_device(model.name).pricing_digest != model.pricing_digest
    ):
        # a copy edited but not renamed: every label and skipped verdict would call it the shipped device
        raise f.fail(
            f"name = {model.name!r} is a shipped device's name, and this file prices differently: give it a "
            f"name of its own (and a validation text of its own)"
        )
    return model


def _resources(data: Mapping[str, Any], f: _DeviceFile) -> list[Resource]:
    """A device file's resources, each rate checked and sourced (per_cycle ones priced at clock_ghz); every
    instruction class must be executed by one of them."""
    clock = data.get("clock_ghz")
    resources = []
    covered: set[str] = set()
    for name, table in (data.get("resources") or {}).items():
        if not isinstance(table, dict):
            raise f.fail(f"resources.{name} must be a table")
        rates: dict[str, float] = {}
        sources: dict[str, str] = {}
        for unit in ("per_ns", "per_cycle"):
            for cls, value in (table.get(unit) or {}).items():
                if cls != ALL_CLASSES and cls not in NAMES:
                    raise f.fail(
                        f"resources.{name}.{unit}.{cls} names no instruction class; the classes are "
                        f"{', '.join(NAMES)} (or '{ALL_CLASSES}')"
                    )
                if cls in rates:
                    raise f.fail(f"resources.{name} gives {cls} twice")
                rate = f.number(value, f"resources.{name}.{unit}.{cls}", RATE)
                if unit == "per_cycle":
                    rate *= f.number(clock, "clock_ghz (needed by per_cycle rates)", CLOCK_GHZ)
                    f.sourced(data, "clock_ghz", "clock_ghz")
                rates[cls] = rate
                sources[cls] = f.sourced(table, cls, f"resources.{name}.{unit}.{cls}")
        if not rates:
            raise f.fail(f"resources.{name} has no rates (per_ns or per_cycle)")
        covered |= set(rates) - {ALL_CLASSES}  # a width over all classes does not say where one executes
        resources.append(Resource(name, str(table.get("what", "")), rates, sources))
    missing = [n for n in NAMES if n not in covered]
    if missing:
        raise f.fail(f"no resource executes the instruction class(es) {', '.join(missing)}")
    return resources


def time_text(ms: float) -> str:
    """A modelled time to four significant digits in the unit that shows them (ms, us or ns): a batch-1 layer is
    tens of nanoseconds, and "0.000 ms off, 0.000 ms on" showed nothing. The one format
    of modelled time in messages, verdicts and reports."""
    if not math.isfinite(ms):
        return f"{ms} ms"
    size = abs(ms)
    if size == 0:
        return "0"  # in no unit: beside "2.815 us", "0 ms" read as two units
    if size >= 1:
        return f"{ms:.4g} ms"
    if size >= 1e-3:
        return f"{ms * 1e3:.4g} us"
    return f"{ms * 1e6:.4g} ns"


@dataclass(frozen=True)
class ModelledSpeedup:
    """How many times faster one modelled profile is than another on one device: a model's answer, so
    ``low`` and ``high`` equal ``value`` (there is no sampling error to bound; the model's own error is
    in ``device.validation``)."""

    value: float
    device: str
    validation: str
    this: str
    other: str
    this_ms: float
    other_ms: float
    by_category: Mapping[str, float] = field(default_factory=dict)

    @property
    def low(self) -> float:
        return self.value

    @property
    def high(self) -> float:
        return self.value

    def __repr__(self) -> str:
        return (
            f"ModelledSpeedup({self.value:.2f}x modelled on {self.device} ({self.validation}): {self.this} "
            f"{time_text(self.this_ms)} over {self.other} {time_text(self.other_ms)}; not a measurement)"
        )

    __str__ = __repr__


@dataclass(frozen=True)
class ModelledTime:
    """One profile's operators priced on one device: per operator, per category and end to end (ms)."""

    device: DeviceModel
    label: str  # the profile's label
    ops: pd.DataFrame  # event, op, category, delegated, identity, modelled_ms, bound
    outside_ops_ms: float  # Method::execute outside every operator (delegate calls' own work, the runtime)

    @property
    def e2e_ms(self) -> float:
        return float(self.ops["modelled_ms"].sum()) + self.outside_ops_ms

    @property
    def category_ms(self) -> dict[str, float]:
        """Modelled ms per category; OTHER is end to end minus the named ones, as in the Profile."""
        named = {
            c.value: float(self.ops.loc[self.ops["category"] == c.value, "modelled_ms"].sum())
            for c in Category
            if c is not Category.OTHER
        }
        return {**named, Category.OTHER.value: self.e2e_ms - sum(named.values())}

    def share(self, category: str | Category) -> float:
        total = self.e2e_ms
        return self.category_ms[Category.parse(category).value] / total if total > 0 else 0.0

    def speedup_over(self, other: "ModelledTime") -> ModelledSpeedup:
        """``other``'s modelled time over this one's, end to end and per category (same device only)."""
        self._same_device(other)
        mine, theirs = self.category_ms, other.category_ms
        return ModelledSpeedup(
            other.e2e_ms / self.e2e_ms if self.e2e_ms > 0 else math.inf,
            self.device.name,
            self.device.validation,
            self.label,
            other.label,
            self.e2e_ms,
            other.e2e_ms,
            {c: (theirs[c] / mine[c] if mine[c] > 0 else math.nan) for c in mine},
        )

    def __repr__(self) -> str:  # the dataclass's would print the whole device file
        return (
            f"ModelledTime({self.label}: {time_text(self.e2e_ms)} end to end, {len(self.ops)} operators, "
            f"{self.device.label}; a model, not a measurement)"
        )

    __str__ = __repr__

    def slower_than(self, other: "ModelledTime", by: float = 1.0) -> pd.DataFrame:
        """Operators modelled more than ``by`` times slower here than in ``other`` (SME2 on against off: where
        SME2 costs time, as in XNNPACK's batch-1 GEMV case), paired by graph identity (the same node of the
        program), slowest first: identity, category, event, other_event, modelled_ms, other_ms, ratio."""
        __tracebackhide__ = True
        if isinstance(by, bool) or not (isinstance(by, numbers.Real) and math.isfinite(by) and by >= 1.0):
            raise UsageError(
                f"slower_than(by={by!r}): by is how many times slower an operator must be to be listed, "
                f"a number >= 1 (1.0: any slower)"
            )
        self._same_device(other)
        theirs = other.ops[["identity", "event", "modelled_ms"]].rename(
            columns={"event": "other_event", "modelled_ms": "other_ms"}
        )
        rows = self.ops[["identity", "category", "event", "modelled_ms"]].merge(theirs, on="identity")
        rows["ratio"] = rows["modelled_ms"] / rows["other_ms"].where(rows["other_ms"] > 0)
        return rows[rows["ratio"] > by].sort_values("ratio", ascending=False).reset_index(drop=True)

    def _same_device(self, other: "ModelledTime") -> None:
        if not isinstance(other, ModelledTime):
            raise TypeError(
                f"a modelled time is compared with a modelled time (profile.modelled({self.device.name!r}))"
                f", not with {type(other).__name__}: measured and modelled time never mix"
            )
        if other.device.name != self.device.name:
            raise ValueError(
                f"{self.label} is modelled on {self.device.name}, {other.label} on {other.device.name}; "
                f"compare two profiles modelled on the same device"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.name,
            "validation": self.device.validation,
            "e2e_ms": self.e2e_ms,
            "category_ms": self.category_ms,
            "outside_ops_ms": self.outside_ops_ms,
        }


@dataclass(frozen=True)
class Traffic:
    """Per operator, the bytes it reads and the bytes it writes (NaN: unknown, priced as no bytes).

    They travel together because they are priced together: the memory term of an operator's time
    (DeviceModel.memory_ns) weighs both against one L2 size, loads and stores at their own rates."""

    bytes_read: np.ndarray
    bytes_written: np.ndarray


@dataclass(frozen=True)
class PricingInputs:
    """What pricing one counted run on a device needs, and nothing else: per operator (rows of ``ops``: event, op,
    category, delegated) its instructions per class of NAMES and its bytes, its graph node, the instructions
    outside every operator, and the vector length and threads it was counted with. ``to_dict`` is its JSON
    form, so a long count (SqueezeSAM's, over an hour under emulation) can be kept and priced again on any
    device file with no emulation (benchmarks/device_model_validation.py --save-counts)."""

    label: str
    ops: pd.DataFrame
    mix: np.ndarray  # operators x NAMES
    outside_mix: np.ndarray  # NAMES: Method::execute's instructions outside every operator (delegate calls, runtime)
    bytes_read: np.ndarray  # NaN: unknown (priced as no bytes)
    bytes_written: np.ndarray
    identities: list[str] | None
    svl_bits: int | None
    threads: int

    COLUMNS: ClassVar[tuple[str, ...]] = ("event", "op", "category", "delegated")

    @classmethod
    def counted(
        cls,
        label: str,
        mix: pd.DataFrame,
        classes: Mapping[str, Any],
        ops: pd.DataFrame,
        identities: list[str] | None,
        metadata: Mapping[str, Any],
    ) -> "PricingInputs":
        """Pricing inputs from what a counted run holds, passed explicitly (Profile.pricing_inputs): the
        per-operator class counts ``mix`` (Profile.instruction_mix), each class's trace (``execute_values``,
        ``op_values``) for the instructions outside operators, the operator rows with their bytes, each
        operator's graph node, and the run's metadata (vector length, threads)."""
        outside = np.array(
            [float(np.median(classes[n].execute_values - classes[n].op_values.sum(axis=0))) for n in NAMES]
        )
        missing = np.full(len(mix), np.nan)
        return cls(
            label=label,
            ops=mix[list(cls.COLUMNS)].reset_index(drop=True),
            mix=mix[list(NAMES)].to_numpy(dtype=float),
            outside_mix=outside,
            bytes_read=ops["bytes_read"].to_numpy(dtype=float) if "bytes_read" in ops else missing,
            bytes_written=ops["bytes_written"].to_numpy(dtype=float) if "bytes_written" in ops else missing,
            identities=identities,
            svl_bits=((metadata.get("target") or {}).get("details") or {}).get("svl_bits"),
            threads=int(metadata.get("runtime_threads") or (metadata.get("run") or {}).get("threads") or 1),
        )

    def priced(self, model: DeviceModel) -> ModelledTime:
        """Priced on ``model``; a UsageError where the model does not hold (another vector length, more threads)."""
        __tracebackhide__ = True
        if self.svl_bits is not None and int(self.svl_bits) != model.svl_bits:
            raise UsageError(
                f"{self.label} was counted at a streaming vector length of {self.svl_bits} bits and "
                f"{model.name} has {model.svl_bits}: an outer product's work depends on it; count at "
                f"--sme2-emulated-svl={model.svl_bits}"
            )
        if self.threads > model.threads:
            raise UsageError(
                f"{self.label} ran {self.threads} threads and {model.name} is modelled for "
                f"{model.threads}: threads share one SME unit per cluster (4 M4 threads reach the FMOPA "
                f"rate of one), which this model does not cover; model a threads=1 variant"
            )
        return modelled_time(
            model,
            self.label,
            self.ops,
            self.mix,
            self.outside_mix,
            Traffic(self.bytes_read, self.bytes_written),
            self.identities,
        )

    def to_dict(self) -> dict[str, Any]:
        unknown_as_null = lambda values: [None if x != x else float(x) for x in values]  # noqa: E731
        return {
            "label": self.label,
            "classes": list(NAMES),
            "svl_bits": self.svl_bits,
            "threads": self.threads,
            "ops": {c: [v.item() if hasattr(v, "item") else v for v in self.ops[c]] for c in self.COLUMNS},
            "mix": self.mix.tolist(),
            "outside_mix": self.outside_mix.tolist(),
            "bytes_read": unknown_as_null(self.bytes_read),
            "bytes_written": unknown_as_null(self.bytes_written),
            "identities": self.identities,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PricingInputs":
        """``to_dict``'s form back; a UsageError when it was counted with other instruction classes."""
        if list(data.get("classes", ())) != list(NAMES):
            raise UsageError(
                f"saved counts of {data.get('label')} have the instruction classes "
                f"{data.get('classes')}; this pytest-sme2 counts {list(NAMES)}: count again"
            )
        as_array = lambda values: np.array([np.nan if x is None else x for x in values], dtype=float)  # noqa: E731
        return cls(
            label=data["label"],
            ops=pd.DataFrame(dict(data["ops"])),
            mix=np.array(data["mix"], dtype=float),
            outside_mix=np.array(data["outside_mix"], dtype=float),
            bytes_read=as_array(data["bytes_read"]),
            bytes_written=as_array(data["bytes_written"]),
            identities=data["identities"],
            svl_bits=data["svl_bits"],
            threads=int(data["threads"]),
        )


def price_run(
    inputs: PricingInputs | None, label: str, emulated: bool, device: "str | Path | DeviceModel"
) -> ModelledTime:
    """A run's pricing inputs (Profile.pricing_inputs; None where it was not counted by instruction class)
    priced on ``device`` (a shipped name, a device file or a DeviceModel; Profile.modelled), refused with a
    UsageError saying why where the model does not hold."""
    __tracebackhide__ = True  # a usage error names its cause; pytest shows the user's line, not these frames
    model = device_of(device)
    if inputs is None:
        if emulated:  # no advice to use the emulated target it is already on
            raise UsageError(
                f"{label} was not counted by instruction class, which modelled time on "
                f"{model.name} needs: the counted inference is the kernel trace's, and "
                f"--sme2-no-kernel-trace (ini sme2_kernel_trace = false) skips it; run without it"
            )
        raise UsageError(
            f"{label} has no instruction classes to model {model.name} with: modelled time needs "
            f"a run counted under emulation (--sme2-target=emulated, or auto on a CPU without SME2)"
        )
    return inputs.priced(model)


def modelled_time(
    device: DeviceModel,
    label: str,
    ops: pd.DataFrame,
    mix: np.ndarray,
    outside_mix: np.ndarray,
    traffic: Traffic,
    identities: "list[str] | None" = None,
) -> ModelledTime:
    """Price ``mix`` (one row per operator of ``ops``, one column per class of NAMES) with each operator's
    ``traffic``, and the instructions outside operators (``outside_mix``, no bytes), on ``device``.
    ``identities``: each operator's graph node (identity.py), which pairs operators across SME2 on and off;
    without them, the position in the program."""
    ns, bound = device.op_ns(mix, traffic.bytes_read, traffic.bytes_written) if len(ops) else (np.zeros(0), [])
    out = ops[["event", "op", "category", "delegated"]].copy()
    out["identity"] = identities if identities is not None else [f"operator {i + 1}" for i in range(len(ops))]
    out["modelled_ms"] = ns / 1e6
    out["bound"] = bound
    outside_ns, _ = device.op_ns(np.asarray(outside_mix, dtype=float)[None, :], np.zeros(1), np.zeros(1))
    return ModelledTime(device, label, out.reset_index(drop=True), float(outside_ns[0]) / 1e6)

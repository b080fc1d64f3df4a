"""The gate record, declared once: what a profile means to the gate, field by field, with its format version.

Why one declaration: a measurement reaches the gate as this record, is written as a baseline file's and a
summary's record and read back into it, is checked on load from these same fields (gate/record_fields.py walks
them: a field declared here is always checked, a key not declared here is refused by name) and is handed to every
check typed (gate/checks/base.py, ``Pair``). Nothing else lists the fields: a new quantity is one field here.

The JSON form is the one baseline files have held since format 1 (the same keys and values; format 2 renamed the
process keys to replica ones, and ``upgraded`` reads format 1's), so committed baselines load unchanged.
Profile.to_dict is what a record is taken from (``GateRecord.of``); a field marked ``kept`` is taken from it as it
is under the same name.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Mapping

from pytest_sme2.export.graph_nodes import WEIGHTS_CHARS
from pytest_sme2.gate.baseline_schema import (
    ANY_OBJECT,
    COUNT,
    FLAG,
    FRACTION,
    NUMBER,
    SHARE,
    SHARES,
    TEXT,
    TEXTS,
    Leaf,
    MapOf,
    count,
    listed,
    number,
    optional,
)
from pytest_sme2.gate.record_fields import WHEN_SET, Object, Part, declared, read_value

# The record's format: a baseline file's "schema" (baselines.SCHEMA_VERSION is this number). A change to what a
# field holds, a renamed key, or a field a reader must have, is a new format; a new optional field is not.
# 2: a *replica* is the gate's sample unit (issue 67), so version 1's process keys carry replica names.
RECORD_VERSION = 2
READABLE_VERSIONS = (1, 2)

# Each format's renamed keys, as (what, path of the old key, new name): what a record ("record") or a summary's
# gate rules ("rules") of an older format held under another name. The one place old keys are read.
_RENAMED_IN: dict[int, tuple[tuple[str, tuple[str, ...], str], ...]] = {
    2: (
        ("record", ("process_sizes",), "replica_sizes"),
        ("record", ("run", "processes"), "replicas"),
        ("record", ("quality", "processes"), "replicas"),
        ("record", ("quality", "check_processes"), "check_replicas"),
        ("record", ("quality", "between_processes"), "between_replicas"),
        ("rules", ("check_processes",), "check_replicas"),
    )
}


def upgraded(data: Any, version: int, what: str = "record") -> Any:
    """``data`` (a record, or a summary's gate rules: ``what``) of format ``version`` in this format's keys, a
    copy; anything but an object is returned as it is, for the field checks to name. Why: stored baselines and
    sessions' summaries of an older pytest-sme2 keep working after a rename; only the names change."""
    if not isinstance(data, Mapping):
        return data
    data = dict(data)
    for later in range(version + 1, RECORD_VERSION + 1):
        for kind, path, new in _RENAMED_IN.get(later, ()):
            *parents, old = path
            holder: Any = data
            for key in parents if kind == what else ():  # copy each object on the way: the caller's is kept
                if not isinstance(holder.get(key), Mapping):
                    holder = None
                    break
                holder[key] = dict(holder[key])
                holder = holder[key]
            if kind == what and holder is not None and old in holder and new not in holder:
                holder[new] = holder.pop(old)
    return data


def _startup(event: str, relative: bool) -> Leaf:
    """A start-up list of a record: one value per runner process, null where every warm load was disturbed."""
    what = (
        f"{event} per runner process, relative to the reference program's load"
        if relative
        else f"ms of {event} per runner process"
    )
    return Leaf(
        optional(listed(lambda x: x is None or (number(x) and x >= 0))),
        f"null or a list of numbers >= 0 ({what}; null: every warm load of that process was disturbed)",
    )


_WEIGHTS_DIGEST = re.compile(rf"[0-9a-f]{{{WEIGHTS_CHARS}}}")


def graph_node(x: Any) -> bool:
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
        and (x[3] is None or listed(count)(x[3]))
        and (len(x) == 4 or x[4] is None or (isinstance(x[4], str) and _WEIGHTS_DIGEST.fullmatch(x[4]) is not None))
    )


def _whole_numbers_map(length: int, what: str) -> MapOf:
    """Name -> a list of ``length`` whole numbers >= 0 (``what`` says which, for the load error)."""
    return MapOf(
        Leaf(lambda x: isinstance(x, list) and len(x) == length and all(count(v) for v in x), what), nullable=True
    )


def _whole_list(what: str) -> Leaf:
    return Leaf(optional(listed(count)), f"null or a list of {what} (whole numbers >= 0)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PerRun(Part):
    """The per-run values behind a measured record's medians: the gate judges them like latency samples."""

    NAME: ClassVar[str] = "a record's per_run"
    shares: Mapping[str, list[float | None] | None] | None = declared(
        MapOf(SHARES, nullable=True), "category -> its share of each run"
    )
    delegation_coverage: list[float | None] | None = declared(SHARES, "the delegate's share of each run")
    sme_path_share: list[float | None] | None = declared(SHARES, "the SME path's share of each run")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Delegation(Part):
    """The export's delegation facts (export/export.py): what the delegation checks and the structure read."""

    NAME: ClassVar[str] = "a record's delegation"
    delegated_nodes: int | None = declared(COUNT, "graph nodes inside the delegate")
    non_delegated_nodes: int | None = declared(COUNT, "graph nodes left to the portable runtime")
    delegated_subgraphs: int | None = declared(COUNT, "delegated subgraphs of the program")
    ops: Mapping[str, list[int]] | None = declared(
        _whole_numbers_map(2, "[delegated, not delegated], two whole numbers >= 0"),
        "operator type -> [delegated, not delegated] nodes",
    )
    nodes: list[list[Any]] | None = declared(
        Leaf(
            optional(listed(graph_node)),
            "null or a list of [node name, delegated, dtype or null, shape or null, weights digest (16 "
            "hex characters) or null, operator name]; records written before export format 5 have no weights "
            "digest, before export format 6 no operator name",
        ),
        "the graph nodes in order (export/graph_nodes.py); absent in records of older pytest-sme2",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory(Part):
    """Memory: what the exporter planned (exact on every target) and the runner's peak (hardware only)."""

    NAME: ClassVar[str] = "a record's memory"
    planned_bytes: int | None = declared(COUNT, "bytes of the memory-planned buffers (from the .pte)")
    planned_buffers: list[int] | None = declared(
        Leaf(optional(listed(count)), "null or a list of buffer sizes in bytes"), "each planned buffer's bytes"
    )
    peak_rss_kb: list[int] | None = declared(
        Leaf(optional(listed(count)), "null or a list of the runner's peak resident KiB per run"),
        "the runner's peak resident KiB per run (null when emulated: it would be qemu's own)",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Counts(Part):
    """Instruction counts: a counted run's (qemu, the emulated target; exact per operator) or callgrind's of a
    host run (``--sme2-metric=instructions``; per inference only). Each keeps the keys it was written with."""

    NAME: ClassVar[str] = "a record's instructions"
    source: str | None = declared(TEXT, "who counted: 'qemu (emulated target)' or 'callgrind (host)'")
    per_inference: float | None = declared(NUMBER, "instructions of one inference")
    sme_per_inference: float | None = declared(NUMBER, "SME instructions of one inference")
    sme_share_of_conv_gemm: float | None = declared(FRACTION, "SME instructions' share of CONV and GEMM's")
    shares: Mapping[str, float | None] | None = declared(MapOf(SHARE, nullable=True), "category -> instruction share")
    delegation_coverage: float | None = declared(FRACTION, "the delegate's share of the instructions")
    sme_path_share: float | None = declared(FRACTION, "the SME path's share of the instructions")
    sme_path_basis: str | None = declared(TEXT, "what the SME path share was decided by")
    load: int | None = declared(COUNT, "instructions of Program::load_method")
    init: int | None = declared(COUNT, "instructions of Method::init")
    ops: Mapping[str, list[int]] | None = declared(
        _whole_numbers_map(3, "[execution order, instructions, SME instructions], three whole numbers >= 0"),
        "op id -> [execution order, instructions, SME instructions] (the order pairs records without identities)",
    )
    sme_kernels: list[str] | None = declared(TEXTS, "the SME kernels that executed")
    op_identity: Mapping[str, str] | None = declared(
        MapOf(Leaf(lambda x: isinstance(x, str), "a string"), nullable=True),
        "op id -> its graph node's name (evidence/identity.py); absent in records of older pytest-sme2",
        written=WHEN_SET,
    )
    mix: Mapping[str, int] | None = declared(
        MapOf(Leaf(count, "a whole number >= 0"), nullable=True),
        "instruction class (evidence/instruction_classes.py) -> instructions of one inference; absent in older "
        "records",
        written=WHEN_SET,
    )
    # callgrind's count of a host run (run/callgrind.py, InstructionCount)
    total_n: int | None = declared(COUNT, "callgrind: instructions of the run of n inferences", written=WHEN_SET)
    total_1: int | None = declared(COUNT, "callgrind: instructions of the run of one inference", written=WHEN_SET)
    inferences: int | None = declared(COUNT, "callgrind: the n of total_n", written=WHEN_SET)
    seconds: float | None = declared(NUMBER, "callgrind: how long counting took", written=WHEN_SET)
    runner: str | None = declared(TEXT, "callgrind: the runner it counted", written=WHEN_SET)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Modelled(Part):
    """Modelled device time of a counted run (``--sme2-device``, docs/device_model.md); a refused one keeps why."""

    NAME: ClassVar[str] = "a record's modelled time"
    device: str | None = declared(TEXT, "the device file's name")
    option: str | None = declared(TEXT, "the --sme2-device value that selects it again (a name or a path)")
    pricing_digest: str | None = declared(TEXT, "the digest of the rates that priced it (only equal ones compare)")
    validation: str | None = declared(TEXT, "how the device file was validated")
    refused: str | None = declared(TEXT, "why the model refused this profile (then no numbers)", written=WHEN_SET)
    e2e_ms: float | None = declared(NUMBER, "modelled ms end to end", written=WHEN_SET)
    category_ms: Mapping[str, float | None] | None = declared(
        MapOf(NUMBER, nullable=True), "category -> modelled ms", written=WHEN_SET
    )
    ops: Mapping[str, float | None] | None = declared(
        MapOf(NUMBER, nullable=True), "op id (as in instructions.ops) -> modelled ms", written=WHEN_SET
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampledKernels(Part):
    """One operator's sampled kernel time (a sampling profiler's round): its samples and its top kernels."""

    NAME: ClassVar[str] = "an operator's sampled kernels"
    samples: int | None = declared(COUNT, "samples placed in the operator")
    kernels: Mapping[str, float | None] | None = declared(MapOf(FRACTION), "kernel -> its share of the samples")


_LATENCY = Leaf(
    lambda x: x is None or (isinstance(x, dict) and all(optional(number)(v) for v in x.values())),
    'null or an object of statistics (numbers), e.g. {"median_ms": 1.2, ...}',
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GateRecord(Part):
    """What a baseline keeps of one profile, and what every check reads: everything a verdict compares, and
    where it came from. Fields are optional unless required (files of older versions lack newer ones), but a
    field that is present must have its declared shape."""

    NAME: ClassVar[str] = "a profile record"
    model: str | None = declared(TEXT, "the model's registered name", kept=True)
    recipe: str | None = declared(TEXT, "the export recipe (dtype, quantization, partitioner)", kept=True)
    variant: str | None = declared(TEXT, "the variant (SME2 on or off, threads, phase)", kept=True)
    emulated: bool | None = declared(FLAG, "from the emulated target: judged on counts, never on time", kept=True)
    basis: str | None = declared(TEXT, "what shares are of: time, or counted instructions", kept=True)
    latency: Mapping[str, float | None] | None = declared(
        _LATENCY, "statistics of the runs' ms (null when emulated: emulated time is not time)", required=True
    )
    samples_ms: list[float] = declared(
        Leaf(listed(lambda x: number(x) and x >= 0), "a list of numbers >= 0 (ms per run)"),
        "ms of each timed run (empty when emulated)",
        required=True,
        empty=list,
    )
    reference_ms: list[float] | None = declared(
        Leaf(
            optional(listed(lambda x: number(x) and x > 0)),
            "null or a list of numbers > 0 (ms of the reference program before each run)",
        ),
        "the reference program's ms before each run: the gate compares samples_ms / reference_ms",
        kept=True,
    )
    disturbed_runs: int | None = declared(COUNT, "how many runs were disturbed", kept=True)
    replica_sizes: list[int] | None = declared(
        _whole_list("runs per replica"), "runs per replica, in order: the gate compares replica medians", kept=True
    )
    chunk_sizes: list[int] | None = declared(
        _whole_list("runs per runner process"), "runs per runner process", kept=True
    )
    load_ms_per_chunk: list[float | None] | None = declared(
        _startup("Program::load_method", False), "each runner process's load", kept=True
    )
    init_ms_per_chunk: list[float | None] | None = declared(
        _startup("Method::init", False), "each runner process's init", kept=True
    )
    load_relative_per_chunk: list[float | None] | None = declared(
        _startup("Program::load_method", True), "each runner process's load over the reference's", kept=True
    )
    init_relative_per_chunk: list[float | None] | None = declared(
        _startup("Method::init", True), "each runner process's init over the reference's", kept=True
    )
    disturbed_run_indices: list[int] | None = declared(
        Leaf(optional(listed(count)), "null or a list of run indices (whole numbers >= 0)"),
        "which runs were disturbed",
        kept=True,
    )
    disturbed_references: int | None = declared(COUNT, "how many reference runs were disturbed", kept=True)
    shares: Mapping[str, float | None] = declared(
        MapOf(SHARE), "category -> its share of the run (by the basis)", required=True, kept=True, empty=dict
    )
    per_run: PerRun | None = declared(Object(PerRun), "the per-run values behind the medians", kept=True)
    delegation_coverage: float | None = declared(FRACTION, "the delegate's share of the run", kept=True)
    node_delegation_coverage: float | None = declared(FRACTION, "the delegated share of graph nodes", kept=True)
    delegation: Delegation | None = declared(Object(Delegation), "the export's delegation facts", kept=True)
    portable_ops: list[str] | None = declared(TEXTS, "the portable (not delegated) operators, sorted")
    sme_path_share: float | None = declared(FRACTION, "the SME path's share of CONV and GEMM", kept=True)
    sme_path_ops: int | None = declared(COUNT, "operators on the SME path", kept=True)
    memory: Memory | None = declared(Object(Memory), "planned and peak memory")
    run: Mapping[str, Any] | None = declared(ANY_OBJECT, "how it was run (the RunSpec's settings)")
    provenance: Mapping[str, Any] | None = declared(ANY_OBJECT, "what was exported from what (versions, digests)")
    instructions: Counts | None = declared(Object(Counts), "instruction counts, where counted", written=WHEN_SET)
    modelled: Modelled | None = declared(Object(Modelled), "modelled device time (--sme2-device)", written=WHEN_SET)
    kernel_time: Mapping[str, SampledKernels] | None = declared(
        MapOf(Object(SampledKernels, nullable=False), nullable=True),
        "op id -> its sampled kernels (hardware, a sampled process)",
        written=WHEN_SET,
    )
    quality: Mapping[str, Any] | None = declared(
        ANY_OBJECT, "how fit it is as a baseline (gate/quality.py), when written as one", written=WHEN_SET
    )

    @classmethod
    def problem(cls, data: Any, where: str, nullable: bool = False) -> str | None:
        """What is wrong with one record (a baseline file's, or one a session kept in its summary.json for
        ``pytest-sme2 check``), as ``"<field path> ..."``; None when the gate can judge it. One check for both:
        a NaN or infinite number in either would turn a verdict into an improvement or an inconclusive pass."""
        wrong = super().problem(data, where, nullable)
        if wrong:
            return wrong
        samples, reference = data["samples_ms"], data.get("reference_ms")
        if not (samples or data.get("emulated")):
            return f"{where}.samples_ms is empty (only an emulated record has no timed runs)"
        if reference is not None and len(reference) != len(samples):
            return (
                f"{where}.reference_ms has {len(reference)} entries, one per entry of 'samples_ms' "
                f"({len(samples)}) expected"
            )
        return None

    @classmethod
    def of(cls, profile: Any) -> GateRecord:
        """The record of one Profile, taken from its one JSON form (``Profile.to_dict()``, which the reports read
        too): the ``kept`` fields as they are, the rest without emulated time (a committed emulated baseline then
        changes only with the program). Instructions of callgrind and modelled time are added by
        baselines.record_of."""
        data = profile.to_dict()
        emulated = data["emulated"]
        kept = {
            f.name: read_value(data[f.name], f.metadata["shape"]) for f in cls.declared_fields() if f.metadata["kept"]
        }
        memory = data["memory"]
        return cls(
            **kept,
            latency=None if emulated else data["latency"],
            samples_ms=[] if emulated else data["e2e_ms"],
            portable_ops=sorted({op["op"] for op in data["portable_ops"]}),
            memory=Memory(
                planned_bytes=memory["planned_bytes"],
                planned_buffers=memory["planned_buffers"],
                peak_rss_kb=None if emulated else memory["peak_rss_kb"],
            ),
            run=data["metadata"].get("run", {}),
            provenance=data["metadata"].get("export", {}),
            instructions=None if data["instructions"] is None else Counts.from_json(data["instructions"]),
            kernel_time=kernel_record(data["kernel_time"]),
        )

    @property
    def counts(self) -> Counts | None:
        """The counted run's counts (qemu, the emulated target); None for callgrind's or none."""
        return self.instructions if self.instructions is not None and self.instructions.source == QEMU else None


QEMU = "qemu (emulated target)"


def kernel_record(kernel_time: Mapping[str, Any] | None, per_op: int = 3) -> dict[str, SampledKernels] | None:
    """What a record keeps of sampled kernel time (the profile's ``kernel_time``): per operator (op id), its
    samples and its top kernels' shares, so a later run can tell whether an operator's dominant kernel was
    replaced (verdicts)."""
    if not kernel_time or not kernel_time.get("available"):
        return None
    return {
        op["op"]: SampledKernels(
            samples=int(op["samples"]), kernels={k["kernel"]: float(k["share"]) for k in op["kernels"][:per_op]}
        )
        for op in kernel_time["ops"]
    }


__all__ = [
    "READABLE_VERSIONS",
    "RECORD_VERSION",
    "upgraded",
    "Counts",
    "Delegation",
    "GateRecord",
    "Memory",
    "Modelled",
    "PerRun",
    "SampledKernels",
]

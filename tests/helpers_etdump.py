"""Build synthetic ETDumps whose every event time is known (shared by the reader and profile tests).

Times are nanoseconds. Events are written child-first, as the runtime records
them when they end: delegate ops, then their DELEGATE_CALL; a portable kernel,
then its OPERATOR_CALL; Method::execute last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_sme2.evidence.etdump_writer import SyntheticEvent, write_synthetic_etdump

GAP_NS = 1_000  # idle time between sibling events


@dataclass
class RunSpec:
    """One Method::execute call."""

    e2e_ns: int
    delegate_call_ns: int | None = None  # None: no DELEGATE_CALL in this run
    delegate_instr: int = 0
    delegate_ops: list[tuple[str, int]] = field(default_factory=list)  # (XNNPACK name, ns)
    # (native_call name or None for "no kernel event", kernel ns, OPERATOR_CALL ns, instruction id)
    portable_ops: list[tuple[str | None, int, int, int]] = field(default_factory=list)


def default_block(load_ns: int, init_ns: int, t0: int = 0) -> tuple[str, list[SyntheticEvent]]:
    return (
        "Default",
        [
            SyntheticEvent(t0, t0 + load_ns, name="Program::load_method"),
            SyntheticEvent(t0 + load_ns + GAP_NS, t0 + load_ns + GAP_NS + init_ns, name="Method::init"),
        ],
    )


def execute_block(spec: RunSpec, t0: int) -> tuple[str, list[SyntheticEvent]]:
    """Lay one run out in time starting at t0 and return its block (child-first order)."""
    events: list[SyntheticEvent] = []
    t = t0 + GAP_NS
    if spec.delegate_call_ns is not None:
        dc_start = t
        op_t = dc_start + GAP_NS
        for name, ns in spec.delegate_ops:
            events.append(SyntheticEvent(op_t, op_t + ns, delegate_name=name, instruction_id=spec.delegate_instr))
            op_t += ns
        dc_end = dc_start + spec.delegate_call_ns
        assert op_t <= dc_end, "delegate ops do not fit in their DELEGATE_CALL"
        events.append(SyntheticEvent(dc_start, dc_end, name="DELEGATE_CALL", instruction_id=spec.delegate_instr))
        t = dc_end + GAP_NS
    else:
        assert not spec.delegate_ops
    for name, kernel_ns, call_ns, instr in spec.portable_ops:
        assert call_ns >= kernel_ns
        if name is not None:
            k_start = t + (call_ns - kernel_ns) // 2
            events.append(SyntheticEvent(k_start, k_start + kernel_ns, name=name, instruction_id=instr))
        events.append(SyntheticEvent(t, t + call_ns, name="OPERATOR_CALL", instruction_id=instr))
        t += call_ns + GAP_NS
    assert t <= t0 + spec.e2e_ns, "children do not fit in Method::execute"
    events.append(SyntheticEvent(t0, t0 + spec.e2e_ns, name="Method::execute"))
    return ("Execute", events)


def write_etdump(
    path: str | Path,
    runs: list[RunSpec],
    *,
    load_ns: int | list[int] | None = None,
    init_ns: int | list[int] | None = None,
) -> Path:
    """Write an ETDump with an optional Default block and one Execute block per RunSpec. Lists of ``load_ns``
    and ``init_ns``: the method loaded that many times (the runner's --startup_repeats), in that order."""
    blocks = []
    t = 0
    if load_ns is not None:
        loads = load_ns if isinstance(load_ns, list) else [load_ns]
        inits = init_ns if isinstance(init_ns, list) else [init_ns or 0] * len(loads)
        events = []
        for load, init in zip(loads, inits, strict=True):
            events += default_block(load, init, t)[1]
            t += load + init + 10 * GAP_NS
        blocks.append(("Default", events))
    for spec in runs:
        blocks.append(execute_block(spec, t))
        t += spec.e2e_ns + 10 * GAP_NS
    return write_synthetic_etdump(path, blocks)


def execute_only(path: str | Path, e2e_ns: list[int]) -> Path:
    """An ETDump whose runs contain only Method::execute (for latency-only tests)."""
    return write_etdump(path, [RunSpec(e2e_ns=ns) for ns in e2e_ns])


def write_counts(etdump: Path, classes_of: "dict[str, dict[str, int]]") -> Path:
    """instructions.json beside ``etdump``, as the emulated target's counter writes it (format version 2): per
    event name, its instructions in each class it has (the rest 0); every run and event of that name alike."""
    import json

    from pytest_sme2.evidence.etdump import _columns
    from pytest_sme2.evidence.instruction_classes import NAMES, SME_CLASSES, SVE_CLASSES
    from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, COUNTS_VERSION

    cols = _columns(etdump)
    names = [cols.labels[i] for i in cols.label_id]
    per_event = [classes_of.get(name, {}) for name in names]
    unknown = {c for counts in per_event for c in counts} - set(NAMES)
    assert not unknown, f"no such instruction classes: {unknown}"
    classes = {c: [counts.get(c, 0) for counts in per_event] for c in NAMES}
    document = {
        "version": COUNTS_VERSION,
        "files": {
            "timed": {
                "instructions": [sum(counts.values()) for counts in per_event],
                "sme": [sum(counts.get(c, 0) for c in SME_CLASSES) for counts in per_event],
                "sve": [sum(counts.get(c, 0) for c in SVE_CLASSES) for counts in per_event],
                "classes": classes,
                "functions": [{} for _ in per_event],
            }
        },
    }
    counts_file = Path(etdump).parent / COUNTS_FILE
    counts_file.write_text(json.dumps(document))
    return counts_file


def emulated_metadata(sme2: bool = True, threads: int = 1, svl_bits: int | None = 512) -> dict:
    """A counted emulated run's metadata, as the emulated target records it: what reports and the device model
    read (the SME2 setting, the threads, the streaming vector length; ``None``: a target that names none)."""
    target: dict = {"name": "emulated", "emulated": True}
    if svl_bits is not None:
        target["details"] = {"svl_bits": svl_bits}
    return {"run": {"sme2": sme2, "threads": threads}, "runtime_threads": threads, "target": target}

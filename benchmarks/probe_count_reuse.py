"""Can a counted run reuse the counts of XNNPACK delegates it has counted before? (issue 63, the design question)

Issue 63 asks that a changed block re-counts only its own operators, and that reused counts are shown equal to a
full counted run. This probe measures the premise before anything is built on it. It lowers a model the way the
export does (XnnpackPartitioner), writes each lowered delegate alone as a program of its own
(``LoweredBackendModule.buffer()``: one delegate call, all-ones inputs), counts the whole program and every
delegate alone on the emulated target (SME2 on and off, one inference, no warmup), and compares, delegate by
delegate and operator by operator, the instructions and SME instructions of each XNNPACK operator event.

    python benchmarks/probe_count_reuse.py --model efficient_sam --work DIR [--variants on,off] [--seeds 1,2]
        [--json OUT]

``--seeds`` also counts the whole program (SME2 on) with the model's example inputs, each floating tensor drawn
anew from that seed, and compares every operator with the all-ones run: a count that moves is data-dependent.

What it prints per variant: operators equal and different (with the first differences), the delegates' share of
the program's instructions, and the time the standalone programs took to write and to count. Every instruction
count here is exact; every time is emulated time (how long qemu took on this machine), not SME2 hardware time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import REPO, machine, progress_record

from pytest_sme2.evidence.etdump import DELEGATE_CALL, EXECUTE_BLOCK, RUN_MODEL, read_blocks
from pytest_sme2.evidence.qemu_counts import read_counts
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget


def lower_and_split(model: str, work: Path) -> tuple[Path, list[Path], float]:
    """The whole program and each delegate alone as its own .pte (reused when DIR already holds them)."""
    full = work / "full.pte"
    if full.exists():
        return full, sorted(work.glob("part*.pte")), 0.0
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    sys.path.insert(0, str(REPO))
    module = importlib.import_module(f"models.{model}")
    eager, inputs = module.get_eager_model().eval(), module.get_example_inputs()
    started = time.perf_counter()
    edge = to_edge_transform_and_lower(torch.export.export(eager, inputs), partitioner=[XnnpackPartitioner()])
    graph = edge.exported_program().graph_module
    delegates = [
        getattr(graph, node.args[0].target)
        for node in graph.graph.nodes
        if node.op == "call_function" and "call_delegate" in str(node.target)
    ]
    parts = []
    for index, lowered in enumerate(delegates):  # in the order the program calls them
        parts.append(work / f"part{index:04d}.pte")
        parts[-1].write_bytes(lowered.buffer())
    full.write_bytes(edge.to_executorch().buffer)
    return full, parts, time.perf_counter() - started


def counted_events(
    pte: Path, sme2: bool, out: Path, logs: Path, inputs: Path | None = None
) -> list[tuple[str, str, bool, int, int]]:
    """(block, label, is an XNNPACK operator, instructions, SME instructions) of each event of one counted run;
    ``inputs``: a torch.save of the inputs tuple, else the runner's all-ones inputs."""
    result = EmulatedTarget(logs, options=EmulatedOptions(fresh=True)).run(
        pte, inputs, RunSpec(sme2=sme2, runs=1, warmup=0, timeout_s=3600), out
    )
    _, files = read_counts(Path(result.evidence["instruction_counts"]))
    counts = files["timed"]
    events = [(block.name, event) for block in read_blocks(out / "timed.etdp") for event in block.events]
    if len(events) != len(counts["instructions"]):
        raise SystemExit(f"{out}: {len(events)} ETDump events but {len(counts['instructions'])} counts")
    return [
        (block, event.label, event.is_delegate_op, int(n), int(sme))
        for (block, event), n, sme in zip(events, counts["instructions"], counts["sme"])
    ]


def delegate_calls(events: list[tuple[str, str, bool, int, int]]) -> list[dict[str, Any]]:
    """Each DELEGATE_CALL of the inference with the XNNPACK operator events that precede it in the file (the
    ETDump records a delegate's operators before the call event that encloses them)."""
    calls: list[dict[str, Any]] = []
    pending: list[tuple[str, int, int]] = []
    for block, label, is_op, n, sme in events:
        if block != EXECUTE_BLOCK:
            continue
        if is_op:
            pending.append((label, n, sme))
        elif label == DELEGATE_CALL:
            calls.append({"instructions": n, "operators": pending})
            pending = []
    return calls


def compare(full: list[dict[str, Any]], alone: list[dict[str, Any]]) -> dict[str, Any]:
    """Operator by operator: how many counts are equal, which differ and by how much."""
    equal, differ, examples, by_kind = 0, 0, [], Counter()
    for index, (whole, part) in enumerate(zip(full, alone)):
        if [op[0] for op in whole["operators"]] != [op[0] for op in part["operators"]]:
            raise SystemExit(f"delegate {index}: other operators alone than in the program")
        for (label, n, sme), (_, n_alone, sme_alone) in zip(whole["operators"], part["operators"]):
            if (n, sme) == (n_alone, sme_alone):
                equal += 1
                continue
            differ += 1
            by_kind[label.split(" #")[0]] += 1
            if len(examples) < 10:
                examples.append(
                    {"delegate": index, "operator": label, "in_program": [n, sme], "alone": [n_alone, sme_alone]}
                )
    return {"equal": equal, "differ": differ, "differ_by_kind": dict(by_kind), "examples": examples}


def seeded_inputs(model: str, seed: int, path: Path) -> Path:
    """The model's example inputs with every floating tensor drawn anew from ``seed`` (torch.save of a tuple)."""
    import torch

    sys.path.insert(0, str(REPO))
    example = importlib.import_module(f"models.{model}").get_example_inputs()
    generator = torch.Generator().manual_seed(seed)
    drawn = tuple(torch.randn(x.shape, generator=generator) if x.is_floating_point() else x for x in example)
    torch.save(drawn, path)
    return path


def operator_counts(events: list[tuple[str, str, bool, int, int]]) -> list[tuple[str, int, int]]:
    return [op for call in delegate_calls(events) for op in call["operators"]]


def data_dependence(model: str, full_pte: Path, work: Path, seeds: list[int]) -> dict[str, Any]:
    """SME2 on, the whole program with all-ones inputs and with each seed's: operators whose count moved."""
    ones = counted_events(full_pte, True, work / "full_on_ones", work / "logs")
    out: dict[str, Any] = {"ones_inference": _inference(ones)}
    for seed in seeds:
        drawn_inputs = seeded_inputs(model, seed, work / f"inputs_seed{seed}.pt")
        drawn = counted_events(full_pte, True, work / f"full_on_seed{seed}", work / "logs", drawn_inputs)
        moved = [a[0] for a, b in zip(operator_counts(ones), operator_counts(drawn)) if a != b]
        out[f"seed_{seed}"] = {"inference": _inference(drawn), "operators_moved": len(moved), "moved": moved[:10]}
    return out


def _inference(events: list[tuple[str, str, bool, int, int]]) -> int:
    return next(n for block, label, _, n, _ in events if block == EXECUTE_BLOCK and label == RUN_MODEL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficient_sam")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--variants", default="on,off")
    parser.add_argument("--seeds", default="", help="comma-separated seeds for the data-dependence check")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    full_pte, parts, split_s = lower_and_split(args.model, args.work)
    record: dict[str, Any] = {
        "machine": machine(),
        "model": args.model,
        "delegates": len(parts),
        "lower_and_split_s": round(split_s, 1),
    }
    print(
        f"{record['machine']}\n{args.model}: {len(parts)} delegates (lowered and split in {split_s:.0f} s)", flush=True
    )
    variants = [v for v in args.variants.split(",") if v]
    if any(v not in ("on", "off") for v in variants):
        parser.error(f"--variants takes on, off or both (or nothing, with --seeds alone), not {args.variants!r}")
    for variant in variants:
        sme2 = variant == "on"
        started = time.perf_counter()
        whole = counted_events(full_pte, sme2, args.work / f"full_{variant}", args.work / "logs")
        full_s = time.perf_counter() - started
        started = time.perf_counter()
        alone = [counted_events(p, sme2, args.work / f"{p.stem}_{variant}", args.work / "logs") for p in parts]
        parts_s = time.perf_counter() - started
        calls = delegate_calls(whole)
        result = compare(calls, [delegate_calls(events)[0] for events in alone])
        inference = _inference(whole)
        in_delegates = sum(call["instructions"] for call in calls)
        result.update(
            inference_instructions=inference,
            delegate_call_instructions=in_delegates,
            delegate_share=round(in_delegates / inference, 4),
            full_counted_s=round(full_s, 1),
            parts_counted_s=round(parts_s, 1),
        )
        record[f"sme2_{variant}"] = result
        progress_record(f"SME2 {variant}: {json.dumps(result)}", record, args.json)
    if args.seeds:
        record["data_dependence"] = data_dependence(
            args.model, full_pte, args.work, [int(s) for s in args.seeds.split(",")]
        )
        progress_record(f"data dependence: {json.dumps(record['data_dependence'])}", record, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

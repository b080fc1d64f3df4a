"""Can the operators of a changed part be counted in one small program instead of the whole? (issue 63)

Issue 63 asks that a changed block re-counts only its own operators. The first probe
(benchmarks/probe_count_reuse.py) counted each XNNPACK delegate alone, one process each: the operators' counts
matched, but 87 processes took 6-9x the whole program's time, and portable operators were left out. This probe
tries the other way: the selected top-level operators of a lowered program (delegate calls and portable kernels
alike) are copied into ONE composite program, each operator on its own inputs, and those inputs are the values
the operator sees in the real program (every node's value captured on the host by running the lowered graph
with the model's example inputs). The whole program and the composite are then counted on the emulated target
(one inference, no warmup), and every operator of the selection is compared: its kernel events (the XNNPACK
operator events, or the portable ``native_call_*`` event), and the wrapper event around it (DELEGATE_CALL or
OPERATOR_CALL), which the inference total holds but no operator's count does.

    python benchmarks/probe_composite_count.py --model efficient_sam --work DIR [--variants on,off]
        [--select image_encoder.blocks.3] [--json OUT]

``--select PREFIX`` keeps only the operators of modules whose path starts with PREFIX (a delegate belongs to a
module when any node it was lowered from does); without it every operator is copied, which checks the method on
the whole program. What it prints per variant: operators compared, equal and different (kernel events and
wrappers apart, with the first differences), and the seconds each program took to count. The counts are exact;
the seconds are emulated time on this machine (how long qemu took), not SME2 hardware time.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import operator
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import REPO, machine, progress_record

from pytest_sme2.evidence.etdump import EXECUTE_BLOCK, RUN_MODEL, read_blocks
from pytest_sme2.evidence.qemu_counts import read_counts
from pytest_sme2.run.targets.base import RunSpec
from pytest_sme2.run.targets.emulated import EmulatedOptions, EmulatedTarget

_WRAPPERS = ("OPERATOR_CALL", "DELEGATE_CALL")


def lower(model: str) -> tuple[Any, tuple[Any, ...]]:
    """The model lowered as the fp32 export lowers it (XnnpackPartitioner), and its example inputs."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    sys.path.insert(0, str(REPO))
    module = importlib.import_module(f"models.{model}")
    eager, inputs = module.get_eager_model().eval(), module.get_example_inputs()
    return to_edge_transform_and_lower(torch.export.export(eager, inputs), partitioner=[XnnpackPartitioner()]), inputs


def captured_values(program: Any, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """Every node's value when the lowered graph runs on the host with the example inputs (delegates run their
    original graphs): the inputs each copied operator is given in the composite."""
    from torch.fx import Interpreter

    values: dict[str, Any] = {}

    class Capture(Interpreter):
        def run_node(self, node: Any) -> Any:
            values[node.name] = result = super().run_node(node)
            return result

    state = {**program.state_dict, **program.constants}
    user = iter(inputs)
    args = [state[s.target] if s.target is not None else next(user) for s in program.graph_signature.input_specs]
    Capture(program.graph_module).run(*args)
    return values


def module_paths(node: Any, graph_module: Any) -> set[str]:
    """The module paths a top-level node comes from (for a delegate call, those of the nodes it was lowered from)."""
    stacks = [node.meta.get("nn_module_stack", {})]
    if "call_delegate" in str(node.target):
        lowered = getattr(graph_module, node.args[0].target)
        stacks += [n.meta.get("nn_module_stack", {}) for n in lowered.original_module.graph.nodes]
    return {path for stack in stacks for path, _ in stack.values()}


def selected_ops(graph_module: Any, prefix: str | None) -> list[Any]:
    ops = [n for n in graph_module.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    if prefix is None:
        return ops
    return [n for n in ops if any(p == prefix or p.startswith(prefix + ".") for p in module_paths(n, graph_module))]


def composite(graph_module: Any, ops: list[Any], values: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """One program that runs each selected operator once on its own captured inputs and returns its outputs, and
    the inputs to feed it (in the order of its placeholders)."""
    import torch
    from torch.fx.node import map_aggregate

    graph, root, feed, outputs = torch.fx.Graph(), torch.nn.Module(), [], []
    attributes: dict[str, Any] = {}

    def mapped(arg: Any) -> Any:
        if not isinstance(arg, torch.fx.Node):
            return arg
        if arg.op == "get_attr":  # a lowered module
            if arg.target not in attributes:
                setattr(root, arg.target, getattr(graph_module, arg.target))
                attributes[arg.target] = graph.get_attr(arg.target)
            return attributes[arg.target]
        value = values[arg.name]
        if isinstance(value, torch.Tensor) and value.dim() == 0:  # the runner's input files hold no 0-d tensor
            name = f"scalar_{len(attributes)}"
            root.register_buffer(name, value.clone())
            attributes[name] = graph.get_attr(name)
            return attributes[name]
        feed.append(value)
        return graph.placeholder(f"input_{len(feed)}")

    for node in ops:
        target = getattr(node.target, "_op", None)  # an edge operator's ATen overload
        if not isinstance(target, torch._ops.OpOverload):
            target = node.target
        copied = graph.call_function(target, map_aggregate(node.args, mapped), map_aggregate(node.kwargs, mapped))
        value = values[node.name]
        if isinstance(value, (tuple, list)):
            outputs += [
                graph.call_function(operator.getitem, (copied, i))
                for i, item in enumerate(value)
                if isinstance(item, torch.Tensor)
            ]
        else:
            outputs.append(copied)
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(root, graph), tuple(feed)


def to_program(module: Any, feed: tuple[Any, ...]) -> Any:
    import torch
    from executorch.exir import EdgeCompileConfig, to_edge

    exported = torch.export.export(module, feed, strict=False)
    return to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()


def instruction_ops(program: Any) -> list[str]:
    """What each instruction of the program's plan runs: an operator's name, or "delegate"."""
    plan = program.executorch_program.execution_plan[0]
    names = []
    for instruction in plan.chains[0].instructions:
        args = instruction.instr_args
        if hasattr(args, "op_index"):
            op = plan.operators[args.op_index]
            names.append(f"{op.name}.{op.overload}")
        else:
            names.append("delegate" if hasattr(args, "delegate_index") else type(args).__name__)
    return names


def counted_instructions(pte: Path, inputs: Path, sme2: bool, out: Path, plan: list[str]) -> list[dict[str, Any]]:
    """Per executed instruction of one counted inference: what it runs, its kernel events (label, instructions,
    SME instructions) and its wrapper's instructions."""
    result = EmulatedTarget(out.parent / "logs", options=EmulatedOptions(fresh=True)).run(
        pte, inputs, RunSpec(sme2=sme2, runs=1, warmup=0, timeout_s=3600), out
    )
    _, files = read_counts(Path(result.evidence["instruction_counts"]))
    counts = files["timed"]
    events = [(block.name, e) for block in read_blocks(out / "timed.etdp") for e in block.events]
    per: list[dict[str, Any]] = []
    for (block, event), n, sme in zip(events, counts["instructions"], counts["sme"]):
        if block != EXECUTE_BLOCK or event.label == RUN_MODEL:
            continue
        if not per or per[-1]["instruction"] != event.instruction_id:
            per.append({"instruction": event.instruction_id, "op": plan[event.instruction_id], "kernels": []})
        if event.label in _WRAPPERS:
            per[-1]["wrapper"] = int(n)
        else:
            per[-1]["kernels"].append([event.label, int(n), int(sme)])
    return per


def compare(full: list[dict[str, Any]], part: list[dict[str, Any]]) -> dict[str, Any]:
    """The composite's instructions aligned with the program's by what they run (the composite adds copies of
    outputs to_edge inserts; those are left out), then each compared."""
    matcher = difflib.SequenceMatcher(a=[x["op"] for x in full], b=[x["op"] for x in part], autojunk=False)
    result: dict[str, Any] = {
        "compared": 0,
        "kernels_equal": 0,
        "wrappers_equal": 0,
        "kernel_instructions": 0,
        "kernel_abs_difference": 0,
        "wrapper_instructions": 0,
        "wrapper_abs_difference": 0,
        "differ_by_op": Counter(),
        "kernel_differences": [],
    }
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            continue
        for whole, alone in zip(full[i1:i2], part[j1:j2]):
            result["compared"] += 1
            result["kernels_equal"] += whole["kernels"] == alone["kernels"]
            result["wrappers_equal"] += whole.get("wrapper") == alone.get("wrapper")
            kernels = [k[1] for k in whole["kernels"]], [k[1] for k in alone["kernels"]]
            result["kernel_instructions"] += sum(kernels[0])
            result["kernel_abs_difference"] += sum(abs(a - b) for a, b in zip(*kernels))
            result["wrapper_instructions"] += whole.get("wrapper", 0)
            result["wrapper_abs_difference"] += abs(whole.get("wrapper", 0) - alone.get("wrapper", 0))
            if whole["kernels"] != alone["kernels"]:
                result["differ_by_op"][whole["op"]] += 1
            if whole["kernels"] != alone["kernels"] and len(result["kernel_differences"]) < 10:
                result["kernel_differences"].append(
                    {"op": whole["op"], "in_program": whole["kernels"][:3], "composite": alone["kernels"][:3]}
                )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficient_sam")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--variants", default="on,off")
    parser.add_argument("--select", default=None, help="keep the operators of modules under this path")
    parser.add_argument("--no-full", action="store_true", help="count only the composite (time it alone)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    edge, inputs = lower(args.model)
    lowered_s = time.perf_counter() - started
    program = edge.exported_program()
    values = captured_values(program, inputs)
    ops = selected_ops(program.graph_module, args.select)
    all_ops = len(selected_ops(program.graph_module, None))  # before to_executorch adds its allocations
    if not ops:
        parser.error(f"--select {args.select!r}: no operator of {args.model} comes from a module under that path")
    started = time.perf_counter()
    module, feed = composite(program.graph_module, ops, values)
    part_program = to_program(module, feed)
    composite_s = time.perf_counter() - started
    full_program = edge.to_executorch()
    paths = {"full": args.work / "full.pte", "composite": args.work / "composite.pte"}
    paths["full"].write_bytes(full_program.buffer)
    paths["composite"].write_bytes(part_program.buffer)
    torch.save(tuple(inputs), args.work / "full_inputs.pt")
    torch.save(feed, args.work / "composite_inputs.pt")
    record: dict[str, Any] = {
        "machine": machine(),
        "model": args.model,
        "select": args.select,
        "operators_selected": len(ops),
        "operators_in_program": all_ops,
        "lower_s": round(lowered_s, 1),
        "composite_build_s": round(composite_s, 1),
    }
    print(
        f"{record['machine']}\n{args.model}: {len(ops)} of {all_ops} top-level operators selected; "
        f"lowered in {lowered_s:.0f} s, composite built in {composite_s:.1f} s",
        flush=True,
    )
    plans = {"full": instruction_ops(full_program), "composite": instruction_ops(part_program)}
    for variant in [v for v in args.variants.split(",") if v]:
        sme2, counted, seconds = variant == "on", {}, {}
        for name in ("composite",) if args.no_full else ("full", "composite"):
            started = time.perf_counter()
            counted[name] = counted_instructions(
                paths[name], args.work / f"{name}_inputs.pt", sme2, args.work / f"{name}_{variant}", plans[name]
            )
            seconds[name] = round(time.perf_counter() - started, 1)
        result: dict[str, Any] = {"counted_s": seconds}
        if not args.no_full:
            result.update(compare(counted["full"], counted["composite"]))
        record[f"sme2_{variant}"] = result
        progress_record(f"SME2 {variant}: {json.dumps(result)}", record, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How many operators would a changed block re-count, if counts were reused by what an operator is? (issue 63)

A reuse of counts needs a key per operator that stays the same where the operator did not change, whatever the
weights (a re-seeded init changes every weight after an inserted block) and wherever it runs in the program. This
probe computes one such key for every top-level operator of a lowered program, a delegate call or a portable
kernel: the operators' targets, the shapes and dtypes of every tensor they read and write, and their other
arguments (a delegate: those of every node it was lowered from, and its backend and compile specs), never a
tensor's values. It lowers the wheel's EfficientSAM as built (12 encoder blocks) and with one more encoder block
appended, and prints how many operators each program has, how many distinct keys, and how many operators of the
second program have a key the first lacks: what a reuse would have to count.

    python benchmarks/probe_operator_keys.py [--resolution 128] [--json OUT]

Nothing is counted here and nothing is timed but the lowering; the key is a design candidate, not a feature.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import operator
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import REPO, machine, progress_record


def lowered_program(blocks_added: int, resolution: int) -> Any:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    sys.path.insert(0, str(REPO))
    from models._efficient_sam import build, example_inputs

    model = build(resolution)
    for _ in range(blocks_added):
        model.image_encoder.blocks.append(copy.deepcopy(model.image_encoder.blocks[-1]))
    exported = torch.export.export(model, example_inputs(resolution))
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).exported_program()


def _shape_of(value: Any) -> Any:
    import torch

    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("val")
        if isinstance(meta, (tuple, list)):
            return tuple(_shape_of_meta(m) for m in meta)
        return _shape_of_meta(meta)
    if isinstance(value, (tuple, list)):
        return tuple(_shape_of(v) for v in value)
    return repr(value)


def _shape_of_meta(meta: Any) -> Any:
    shape, dtype = getattr(meta, "shape", None), getattr(meta, "dtype", None)
    return ("tensor", tuple(int(s) for s in shape), str(dtype)) if shape is not None else repr(meta)


def _node_text(node: Any) -> str:
    target = getattr(node.target, "__name__", str(node.target))
    return f"{target}({_shape_of(list(node.args))}, {_shape_of(dict(node.kwargs))}) -> {_shape_of(node)}"


def operator_key(node: Any, graph_module: Any) -> str:
    """What the operator is, without its values: see the module's docstring."""
    parts = [_node_text(node)]
    if "call_delegate" in str(node.target):
        lowered = getattr(graph_module, node.args[0].target)
        parts += [lowered.backend_id, repr([(s.key, bytes(s.value)) for s in lowered.compile_specs])]
        parts += [
            _node_text(n) if n.op == "call_function" else f"{n.op} {_shape_of(n)}"
            for n in lowered.original_module.graph.nodes
            if n.op in ("call_function", "placeholder")
        ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def keys_of(program: Any) -> list[str]:
    graph_module = program.graph_module
    return [
        operator_key(n, graph_module)
        for n in graph_module.graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    record: dict[str, Any] = {"machine": machine(), "model": "efficient_sam", "resolution": args.resolution}
    keys = {}
    for added in (0, 1):
        started = time.perf_counter()
        keys[added] = keys_of(lowered_program(added, args.resolution))
        record[f"blocks_added_{added}"] = {
            "operators": len(keys[added]),
            "distinct_keys": len(set(keys[added])),
            "lowered_s": round(time.perf_counter() - started, 1),
        }
    before = set(keys[0])
    new = [k for k in keys[1] if k not in before]
    record["second_program"] = {"operators_with_a_new_key": len(new), "distinct_new_keys": len(set(new))}
    repeated = Counter(keys[0])
    record["first_program"] = {"operators_sharing_a_key": sum(n for n in repeated.values() if n > 1)}
    progress_record(f"{record}", record, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lowered program's graph nodes as the model author wrote them: name, delegated or not, dtype and shape.

The gate pairs a baseline's program with the current one node by node (gate/structure.py). Counts per
operator type cannot do that: a layer added to a model adds portable nodes of kinds the other layers
already run outside the delegate, and a count per type reads that as operators falling out of the
delegate. Each node here is named like identity.node_names names the ETRecord's (module path and aten
operator, " [k]" for the k-th call in one module), in the order of the graph before lowering (debug
handles are numbered in that order), so the names are the ones the counted operators carry.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pytest_sme2.evidence.identity import ROOT

# Nodes that are plumbing, not operators the model author wrote: tuple unpacking and the delegate call itself.
_PLUMBING = ("getitem", "executorch_call_delegate")


def graph_nodes(graph_module: Any) -> list[list[Any]]:
    """``[name, delegated, dtype, shape]`` per operator node of a lowered edge program, in graph order.

    ``dtype`` is the output's (``"float32"``), ``shape`` its sizes; both None for a node with several or
    symbolic outputs. Nodes inside a lowered module are delegated; call_function nodes of the top graph
    are not.
    """
    found: list[tuple[int, int, Any, bool]] = []  # (debug handle, position, node, delegated)
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            inner = getattr(graph_module, node.name).original_module.graph.nodes
            found += [(_handle(n), len(found), n, True) for n in inner if _is_operator(n)]
        elif _is_operator(node):
            found.append((_handle(node), len(found), node, False))
    seen: Counter[str] = Counter()
    out = []
    for _, _, node, delegated in sorted(found, key=lambda item: item[:2]):
        stack = list((node.meta.get("nn_module_stack") or {}).values())
        path = (stack[-1][0] if stack and isinstance(stack[-1], tuple) else "") or ROOT
        base = f"{path}: {getattr(node.target, '__name__', str(node.target))}"
        seen[base] += 1
        dtype, shape = _output(node)
        out.append([base if seen[base] == 1 else f"{base} [{seen[base]}]", delegated, dtype, shape])
    return out


def _is_operator(node: Any) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", str(node.target)) not in _PLUMBING


def _handle(node: Any) -> int:
    handle = node.meta.get("debug_handle")
    return handle if isinstance(handle, int) else 1 << 30  # no handle: after every numbered node, in graph order


def _output(node: Any) -> tuple[str | None, list[int] | None]:
    value = node.meta.get("val")
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None or shape is None:
        return None, None
    # Never int() a symbolic size: that adds a guard to the program's shape environment and specializes the
    # dimension to its example value, so the lowered program would take only that many tokens.
    if not all(type(size) is int for size in shape):
        return str(dtype).removeprefix("torch."), None
    return str(dtype).removeprefix("torch."), list(shape)

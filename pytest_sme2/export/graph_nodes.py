"""The lowered program's graph nodes as the model author wrote them: name, delegated or not, dtype, shape and a
digest of the weights each reads.

The gate pairs a baseline's program with the current one node by node (gate/structure.py). Counts per
operator type cannot do that: a layer added to a model adds portable nodes of kinds the other layers
already run outside the delegate, and a count per type reads that as operators falling out of the
delegate. Each node here is named like identity.node_names names the ETRecord's (module path and aten
operator, " [k]" for the k-th call in one module), in the order of the graph before lowering (debug
handles are numbered in that order), so the names are the ones the counted operators carry.

Names and shapes cannot tell blocks alike in the graph apart: an ``nn.Sequential`` renumbers every child after an
insertion, and the inserted Linear+BatchNorm+ReLU makes the same nodes as the ones it pushed along. Their weights
can (issue 65): a renumbered block keeps its parameters under its new name, an inserted one brings parameters the
baseline never had. So each node also carries a short digest of the constant tensors it reads (parameters, buffers,
lifted constants), which the gate pairs blocks by where names shifted.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from pytest_sme2.evidence.identity import group_names, handle_groups, is_operator, target_name

WEIGHTS_CHARS = 16  # hex characters of a node's weights digest (64 bits: no two tensors of one model collide)


def graph_nodes(program: Any) -> list[list[Any]]:
    """``[name, delegated, dtype, shape, weights, operator]`` per operator node of a lowered edge program (an
    ``ExportedProgram``), in graph order.

    ``dtype`` is the output's (``"float32"``), ``shape`` its sizes; both None for a node with several or
    symbolic outputs. ``weights``: the digest of the constant tensors the node reads (``weights_digest``), None
    for a node that reads none. ``operator``: the name of the operator the model's code called that the node is
    part of (identity.group_names; the node's own name for its first node), which its counted operators carry: a
    record whose rows lack it named decomposed operators after their last node (gate/naming.py). Nodes inside a
    lowered module are delegated; call_function nodes of the top graph are not.
    """
    graph_module = program.graph_module
    weights = _Weights()
    found: list[tuple[Any, bool, Any]] = []  # (node, delegated, its program), in graph order
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            inner = getattr(graph_module, node.name).original_module
            found += [(n, True, inner) for n in inner.graph.nodes if is_operator(n)]
        elif is_operator(node):
            found.append((node, False, program))
    where = {id(node): (delegated, owner) for node, delegated, owner in found}
    groups = handle_groups(node for node, _, _ in found)  # in handle order: the order of the graph before lowering
    out = []
    for (_, members), name in zip(groups, group_names([m for _, m in groups])):
        within: Counter[str] = Counter()
        for position, node in enumerate(members):
            # the group's first node carries its name (the one its counted operators carry); the others are
            # named after it and their own operator: "blocks.0.attn: aten.matmul.default > aten.bmm.default"
            row_name = name
            if position:
                within[target_name(node)] += 1
                count = within[target_name(node)]
                row_name = f"{name} > {target_name(node)}" + (f" [{count}]" if count > 1 else "")
            delegated, owner = where[id(node)]
            dtype, shape = _output(node)
            out.append([row_name, delegated, dtype, shape, weights.of(node, owner), name])
    return out


class _Weights:
    """Digests of the constant tensors nodes read, each tensor hashed once however many nodes read it."""

    def __init__(self) -> None:
        self._tensors: dict[tuple[int, str], bytes | None] = {}
        self._constants: dict[int, dict[str, Any]] = {}

    def of(self, node: Any, program: Any) -> str | None:
        """The node's weights digest: sha256 over the digest of each constant it reads, in argument order (a
        constant read twice counts twice), its first WEIGHTS_CHARS hex characters; None when it reads no
        constant, or one whose bytes cannot be read (a meta tensor)."""
        import torch.fx

        if id(program) not in self._constants:
            self._constants[id(program)] = _constants_of(program)
        constants = self._constants[id(program)]
        parts: list[bytes] = []
        for arg in _flat(list(node.args) + list(node.kwargs.values())):
            if not isinstance(arg, torch.fx.Node):
                continue
            if arg.op == "placeholder" and arg.name in constants:
                key, tensor = (id(program), arg.name), constants[arg.name]
            elif arg.op == "get_attr" and not arg.name.startswith("lowered_module_"):
                key, tensor = (id(program), f"attr:{arg.target}"), _attribute(program.graph_module, str(arg.target))
            else:
                continue
            if key not in self._tensors:
                self._tensors[key] = tensor_digest(tensor)
            digest = self._tensors[key]
            if digest is None:
                return None
            parts.append(digest)
        return weights_digest(parts)


def weights_digest(tensor_digests: list[bytes]) -> str | None:
    """A node's weights digest from its constants' (tensor_digest), in the order it reads them; None for none."""
    return hashlib.sha256(b"".join(tensor_digests)).hexdigest()[:WEIGHTS_CHARS] if tensor_digests else None


def tensor_digest(tensor: Any) -> bytes | None:
    """sha256 of a tensor's dtype, shape and bytes (row-major), None when it holds no readable bytes."""
    import torch

    # a tensor subclass (a fake or meta tensor, torchao's packed weights) has no plain bytes to read
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.is_meta:
        return None
    data = tensor.detach()
    if data.is_quantized:
        data = data.int_repr()
    digest = hashlib.sha256(f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}|".encode())
    digest.update(data.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.digest()


def _constants_of(program: Any) -> dict[str, Any]:
    """Placeholder name -> tensor, for every parameter, buffer and lifted constant of an ``ExportedProgram``."""
    signature = program.graph_signature
    state, constants = program.state_dict, getattr(program, "constants", {}) or {}
    out = {}
    for names in (
        signature.inputs_to_parameters,
        signature.inputs_to_buffers,
        getattr(signature, "inputs_to_lifted_tensor_constants", {}),
    ):
        for placeholder, target in names.items():
            if target in state:
                out[placeholder] = state[target]
            elif target in constants:
                out[placeholder] = constants[target]
    return out


def _attribute(module: Any, target: str) -> Any:
    for part in str(target).split("."):
        module = getattr(module, part, None)
    return module


def _flat(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        out += _flat(list(value)) if isinstance(value, (list, tuple)) else [value]
    return out


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

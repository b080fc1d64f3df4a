"""The export cache's key: a digest of the traced program's own content.

Why content and not source: a model's program depends on more than the file that defines
``get_eager_model`` (the modules it imports, the weights files it loads, the values of its example
and calibration inputs), and no list of files can be complete. What ``torch.export`` produces from all
of that is complete by construction: its ATen graph (code of every graph module, the graph signature,
the range constraints), every parameter, buffer and constant tensor byte for byte, plus the input
values the program is exported and calibrated with. Two models with the same digest lower to the same
program; a change anywhere the program can see changes the digest.

Nothing process-dependent goes in: node and constant names come from module paths and counters,
tensors are hashed by dtype, shape and bytes (never by address or ``repr``), and the text of the
graph carries no file names or line numbers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

KEY_CHARS = 24  # hex characters of the cache key (96 bits)


def program_digest(program: Any, inputs: tuple, calibration: Iterable[tuple] | None) -> str:
    """sha256 (hex) of an ATen ExportedProgram's content and the input values it is lowered and calibrated
    with: what the model is, independent of recipe and versions (those are in :func:`cache_key`)."""
    digest = hashlib.sha256()
    _update_graphs(digest, program)
    _update_text(digest, "signature", str(program.graph_signature))
    _update_text(digest, "range_constraints", _range_constraints(program))
    for name, tensor in sorted(program.state_dict.items()):
        _update_text(digest, "state", name)
        _update_value(digest, tensor)
    for name, constant in sorted(program.constants.items()):
        _update_text(digest, "constant", name)
        _update_value(digest, constant)
    _update_text(digest, "inputs", "")
    _update_tree(digest, inputs)
    _update_text(digest, "calibration", "none" if calibration is None else "")
    for sample in calibration or ():
        _update_tree(digest, sample)
    return digest.hexdigest()


def inputs_digest(inputs: Any) -> str:
    """sha256 of an input structure alone (structure, dtypes, shapes, bytes), as program_digest hashes it: an
    export cache entry's inputs.pt is checked against the request's example inputs by it (export.py)."""
    digest = hashlib.sha256()
    _update_tree(digest, inputs)
    return digest.hexdigest()


def cache_key(digest: str, recipe: dict[str, Any] | None, versions: dict[str, Any]) -> str:
    """The cache key of a program digest with the recipe and tool versions that lower it (``recipe`` None: a
    cache entry that names none, checked again; its key then matches no request)."""
    material = {"program": digest, "recipe": recipe, **versions}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:KEY_CHARS]


def _update_text(digest: "hashlib._Hash", tag: str, text: str) -> None:
    """A tagged, length-prefixed string, so that no two different sequences of parts hash alike."""
    data = text.encode("utf-8", "surrogatepass")
    digest.update(f"\0{tag}:{len(data)}:".encode())
    digest.update(data)


def _update_graphs(digest: "hashlib._Hash", program: Any) -> None:
    """The generated code of the top graph and of every nested graph (control flow, higher-order ops)."""
    import torch.fx

    for name, module in program.graph_module.named_modules():
        if isinstance(module, torch.fx.GraphModule):
            _update_text(digest, f"graph {name}", module.code)


def _range_constraints(program: Any) -> str:
    """Range constraints as sorted text: symbol names are stable, dict order need not be."""
    return "\n".join(sorted(f"{symbol}: {bounds}" for symbol, bounds in program.range_constraints.items()))


def _update_tree(digest: "hashlib._Hash", value: Any) -> None:
    """A nested input (tuple, list, dict of tensors and scalars): its structure, then every leaf."""
    from torch.utils import _pytree

    leaves, spec = _pytree.tree_flatten(value)
    _update_text(digest, "tree", str(spec))
    for leaf in leaves:
        _update_value(digest, leaf)


def _update_value(digest: "hashlib._Hash", value: Any) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        _update_tensor(digest, value)
    elif hasattr(value, "__obj_flatten__"):  # a torchbind object: its flattened state
        _update_text(digest, "object", type(value).__qualname__)
        _update_tree(digest, [v for _, v in value.__obj_flatten__()])
    else:  # an int, float, bool, str or None input; an object without a stable repr only costs a re-export
        _update_text(digest, "value", f"{type(value).__qualname__} {value!r}")


def _update_tensor(digest: "hashlib._Hash", tensor: Any) -> None:
    """dtype, shape and raw bytes of a tensor; quantized tensors by their integers and quantisation
    parameters, sparse ones densified, bf16/fp16 as their bit patterns (numpy has no bf16)."""
    import torch

    tensor = tensor.detach()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    header = f"{tensor.dtype} {list(tensor.shape)}"
    if tensor.is_quantized:
        header += f" {_quantisation(tensor)}"
        tensor = tensor.int_repr()
    if tensor.device.type == "meta":  # no data to hash: shape only (a meta tensor cannot be lowered anyway)
        _update_text(digest, "tensor", header + " meta")
        return
    _update_text(digest, "tensor", header)
    flat = tensor.cpu().contiguous().reshape(-1)
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().data)


def _quantisation(tensor: Any) -> str:
    """The quantisation parameters of a quantized tensor, as text (scales and zero points by value)."""
    import torch

    scheme = tensor.qscheme()
    if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return f"{scheme} {tensor.q_scale()!r} {tensor.q_zero_point()}"
    scales = tensor.q_per_channel_scales().tolist()
    zero_points = tensor.q_per_channel_zero_points().tolist()
    return f"{scheme} axis={tensor.q_per_channel_axis()} {scales!r} {zero_points!r}"

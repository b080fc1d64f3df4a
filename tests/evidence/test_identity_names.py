"""A decomposed operator's nodes are named after the operator the model's code called (evidence/identity.py).

A decomposition keeps the debug handle of the operator it replaced on every node it makes. The name of a handle
used to be that of whichever node with it came last. So EfficientSAM's bicubic resizes read as
``image_encoder: aten.add.Tensor [27] [k]``, every LayerNorm as ``norm1: getitem [3]``, and every attention
matmul as ``attn: aten.view_copy.default [4] [5]``. Checked here on a real export, and on a counted run's
operators."""

from __future__ import annotations

from pathlib import Path

import torch

from pytest_sme2.evidence.identity import graph_anchors
from pytest_sme2.export.graph_nodes import graph_nodes
from tests.helpers_emulated import counted_profiles

MODEL = """
import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.attn = Attention()

    def forward(self, x):
        h = self.norm(x)
        scores = self.attn(h, h)
        return F.interpolate(scores.unsqueeze(0), size=(12, 12), mode="bicubic", align_corners=False)


def get_eager_model():
    torch.manual_seed(0)
    return Model().eval()


def get_example_inputs():
    return (torch.rand(2, 6, 8),)
"""


def _module() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    namespace: dict = {}
    exec(compile(MODEL, "model.py", "exec"), namespace)  # noqa: S102 - the test's own model source
    return namespace["get_eager_model"](), namespace["get_example_inputs"]()


def _lowered_with_etrecord(tmp_path: Path) -> tuple[object, Path]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model, inputs = _module()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()], generate_etrecord=True
    )
    program = edge.exported_program()
    rows = graph_nodes(program)
    etrecord = tmp_path / "model.etrecord"
    edge.to_executorch().get_etrecord().save(str(etrecord))
    return rows, etrecord


def test_decomposed_operators_are_named_after_the_call_in_the_models_code(tmp_path: Path) -> None:
    rows, etrecord = _lowered_with_etrecord(tmp_path)
    names = set(graph_anchors(etrecord)[0].values())
    assert "attn: aten.matmul.default" in names, sorted(names)
    assert "<root>: aten.upsample_bicubic2d.vec" in names, sorted(names)
    assert not [n for n in names if "getitem" in n or "view_copy" in n.split(": ")[0]], sorted(names)
    # the graph rows the gate pairs nodes by carry the same names; a group's other nodes are named after it
    row_names = [row[0] for row in rows]
    assert names <= set(row_names), sorted(names - set(row_names))
    assert any(n.startswith("attn: aten.matmul.default > aten.bmm.default") for n in row_names), row_names
    assert len(row_names) == len(set(row_names))


def test_a_counted_runs_gathers_and_batch_matmul_carry_their_operators_names(tmp_path: Path) -> None:
    (profile,) = counted_profiles(tmp_path, "named_ops", [True], source=MODEL)
    identities = profile.to_dict()["instructions"]["op_identity"]
    gathers = {op: name for op, name in identities.items() if op.startswith("native_call_index.Tensor")}
    assert gathers and all(name.startswith("<root>: aten.upsample_bicubic2d.vec") for name in gathers.values())
    matmuls = [name for op, name in identities.items() if op.startswith("Batch Matrix Multiply")]
    # numbered after the reshapes of the same matmul that run before it in its delegate: "... [5]"
    assert len(matmuls) == 1 and matmuls[0].startswith("attn: aten.matmul.default"), identities
    assert not [name for name in identities.values() if "getitem" in name], identities
    assert len(set(identities.values())) == len(identities)

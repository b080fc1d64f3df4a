"""Work per operator from the exported program: exact on hand-counted layers, and matching an independent
count (PyTorch's own FLOP counter on the eager model) on every bundled model."""

from __future__ import annotations

import math

import pytest

from pytest_sme2 import Recipe
from pytest_sme2.evidence.etdump import OpKey
from pytest_sme2.export.work import ProgramFacts, program_work
from pytest_sme2.measure.session import Settings, Sme2Session

LAYERS = '''
"""Every layer kind whose work is counted, with sizes chosen to count by hand."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Conv2d(4, 8, 3, padding=1)            # 8x8 map
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.grouped = torch.nn.Conv2d(8, 16, 3, padding=1, groups=2)
        self.pointwise = torch.nn.Conv2d(16, 32, 1)
        self.linear = torch.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        y = self.pointwise(self.grouped(self.depthwise(self.dense(x))))
        tokens = y.flatten(2)                                          # 1 x 32 x 64
        attention = torch.bmm(tokens.transpose(1, 2), tokens)          # 1 x 64 x 64, reduces over 32
        return self.linear(y.flatten(1)), attention


def get_eager_model():
    torch.manual_seed(0)
    return Net().eval()


def get_example_inputs():
    return (torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1)),)
'''
# By hand: output elements x (filter elements per output channel)
HAND_MACS = {
    "dense": 8 * 8 * 8 * (4 * 3 * 3),  # 18,432
    "depthwise": 8 * 8 * 8 * (3 * 3),  # 4,608
    "grouped": 8 * 8 * 16 * (4 * 3 * 3),  # 36,864: each output channel sees 8/2 input channels
    "pointwise": 8 * 8 * 32 * 16,  # 32,768
    "linear": 10 * (32 * 8 * 8),  # 20,480
    "bmm": 64 * 64 * 32,  # 131,072
}


@pytest.fixture(scope="module")
def layers(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("work")
    (root / "models").mkdir()
    (root / "models" / "layers.py").write_text(LAYERS)
    session = Sme2Session(Settings(target="host", cache_dir=root / "cache", session_dir=root / "run"))
    session.registry.register_dir(root / "models")
    try:
        recipes = {
            "fp32": Recipe(),
            "fp16": Recipe(dtype="fp16"),
            "int8": Recipe(dtype="int8"),
            "int8-dynamic": Recipe(dtype="int8", quant="dynamic"),
        }
        yield {name: session.export("layers", recipe) for name, recipe in recipes.items()}
    finally:
        session.close()


def _graph_macs(exported) -> list[float]:  # noqa: ANN001
    work = program_work(exported.path)
    return sorted(w.macs for nodes in work.delegate_nodes.values() for _, w in nodes if not math.isnan(w.macs))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "int8", "int8-dynamic"])
def test_each_layer_kind_counts_exactly_what_a_hand_count_says(layers, dtype: str) -> None:
    assert _graph_macs(layers[dtype]) == sorted(float(m) for m in HAND_MACS.values())


def test_bytes_of_a_transpose_are_its_tensor_read_and_written(layers) -> None:
    work = program_work(layers["fp32"].path)
    transposes = [w for nodes in work.delegate_nodes.values() for kind, w in nodes if kind == "XNNStaticTranspose"]
    assert transposes, "the partitioner inserts layout transposes around the convolutions"
    for w in transposes:
        assert w.bytes_read == w.bytes_written > 0 and math.isnan(w.macs)


def test_a_kind_whose_operator_count_differs_from_its_nodes_is_left_unknown(layers) -> None:
    work = program_work(layers["fp32"].path)
    (instruction,) = work.delegate_nodes
    convolutions = sum(
        kind in ("XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected") for kind, _ in work.delegate_nodes[instruction]
    )
    ops = [OpKey(f"Convolution (NHWC, F32) IGEMM #{i + 1}", instruction, True) for i in range(convolutions + 1)]
    result = work.for_ops(ops)
    assert all(math.isnan(w.macs) for w in result)
    assert "not matched" in result[0].why_unknown
    matched = work.for_ops(ops[:-1])
    assert not any(math.isnan(w.macs) for w in matched)


def test_facts_are_written_at_export_and_read_back_the_same(layers) -> None:
    entry = layers["fp32"]
    stored = ProgramFacts.of(entry.path, entry.directory)
    assert (entry.directory / "program.json").exists()
    fresh = ProgramFacts.of(entry.path)  # computed from the .pte again
    assert stored.planned_buffers == fresh.planned_buffers and sum(stored.planned_buffers) > 0
    assert stored.work.delegate_nodes == fresh.work.delegate_nodes

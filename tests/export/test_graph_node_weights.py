"""Each graph node of the delegation record carries a digest of the weights it reads (export format 5): a block
renumbered by an insertion into an ``nn.Sequential`` keeps its digest under its new name, the inserted one has a
digest the program never had, and a node that reads no constant has none (issue 65)."""

from __future__ import annotations

import torch

from pytest_sme2.export.export import _delegation_record
from pytest_sme2.export.graph_nodes import WEIGHTS_CHARS, tensor_digest


def _rows(model: torch.nn.Module, partition: bool = True) -> list[list]:
    from executorch.exir import to_edge_transform_and_lower

    partitioners = []
    if partition:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners = [XnnpackPartitioner()]
    exported = torch.export.export(model.eval(), (torch.rand(1, 16),))
    return _delegation_record(to_edge_transform_and_lower(exported, partitioner=partitioners).exported_program())[
        "nodes"
    ]


def _model(insert: bool) -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU()]
    if insert:
        layers[2:2] = [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def test_a_renumbered_linear_keeps_its_digest_and_an_inserted_one_has_its_own() -> None:
    before, after = ({row[0]: row for row in _rows(_model(insert))} for insert in (False, True))
    assert all(len(row) == 6 for row in [*before.values(), *after.values()])
    linear = ": aten.linear.default"
    assert after["2" + linear][4] not in {row[4] for row in before.values()}  # inserted: weights never seen
    assert after["4" + linear][4] == before["2" + linear][4]  # the old .2, now .4, kept its weights
    assert after["0" + linear][4] == before["0" + linear][4]
    assert before["0" + linear][4] != before["2" + linear][4]
    assert all(len(row[4]) == WEIGHTS_CHARS and int(row[4], 16) >= 0 for row in before.values() if "linear" in row[0])
    assert before["1: aten.relu.default"][4] is None  # reads no constant


def test_nodes_outside_the_delegate_are_digested_too() -> None:
    # without a partitioner the Linear is decomposed (a transpose of its weight, an addmm with its bias)
    rows = _rows(_model(False), partition=False)
    first = [row for row in rows if row[0].startswith("0: ")]
    assert first and not any(row[1] for row in first)  # portable: none delegated
    assert any(row[4] for row in first), first


def test_a_tensor_digest_is_of_its_dtype_shape_and_bytes() -> None:
    ones = torch.ones(2, 3)
    assert tensor_digest(ones) == tensor_digest(torch.ones(2, 3).t().contiguous().t())  # layout is not content
    assert tensor_digest(ones) != tensor_digest(torch.ones(3, 2))
    assert tensor_digest(ones) != tensor_digest(torch.ones(2, 3, dtype=torch.float64))
    assert tensor_digest(torch.zeros(4, dtype=torch.int32)) != tensor_digest(torch.zeros(2, dtype=torch.int64))
    changed = torch.ones(2, 3)
    changed[1, 2] = 1.0001
    assert tensor_digest(ones) != tensor_digest(changed)
    assert tensor_digest(torch.ones(2, 3, dtype=torch.bfloat16)) is not None
    assert tensor_digest(torch.empty(2, 3, device="meta")) is None  # no bytes to read

"""Blocks paired by their weights (issue 65): synthetic graph-node rows as records keep them (``delegation.nodes``),
with and without the 5th field, the digest of the weights a node reads (export format 5, export/graph_nodes.py).

Every expected headline is written from the edit made to the rows (which children were inserted where, which kept
their weights), never from a run's output."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sme2.gate import structure
from pytest_sme2.gate.checks.pairing import align_ops, graph_of
from pytest_sme2.gate.record import GateRecord, graph_node

LINEAR, NORM, RELU = "aten.linear.default", "aten._native_batch_norm_legit_no_training.default", "aten.relu.default"
UNTRAINED_NORM = "00bn00bn00bn00bn"  # an untrained BatchNorm's weights: the same in every one


def _hex(word: str) -> str:
    """A 16-hex-character digest standing for ``word``'s weights."""
    return word.encode().hex().ljust(16, "0")[:16]


def sequential(linears: list[str], weights: bool = True) -> list[list[Any]]:
    """Rows of deep_autoencoder's shape: ``encoder_decoder`` children Linear, BatchNorm, ReLU per entry of
    ``linears`` (each Linear's weights named by the entry), then an ``output_layer``; 4-field rows without
    ``weights``."""
    rows: list[list[Any]] = []
    for linear in linears:
        rows.append([LINEAR, True, "float32", [1, 128], _hex(linear)])
        rows.append([NORM, True, None, None, UNTRAINED_NORM])
        rows.append([RELU, True, "float32", [1, 128], None])
    named = [[f"encoder_decoder.{i}: {op}", *rest] for i, (op, *rest) in enumerate(rows)]
    named.append(["output_layer: aten.linear.default", True, "float32", [1, 640], _hex("out")])
    return named if weights else [row[:4] for row in named]


def module_list(layers: list[str], weights: bool = True) -> list[list[Any]]:
    """Rows of a stack of alike transformer-ish layers (``layers.N``: up, act, down) after an embedding."""
    rows: list[list[Any]] = [["embed: aten.embedding.default", True, "float32", [1, 64], _hex("embed")]]
    for i, layer in enumerate(layers):
        rows.append([f"layers.{i}.up: {LINEAR}", True, "float32", [1, 256], _hex(f"{layer}u")])
        rows.append([f"layers.{i}.act: {RELU}", True, "float32", [1, 256], None])
        rows.append([f"layers.{i}.down: {LINEAR}", True, "float32", [1, 64], _hex(f"{layer}d")])
    return rows if weights else [row[:4] for row in rows]


def _headline(rows_then: list[list[Any]], rows_now: list[list[Any]]) -> list[str]:
    then, now = (
        structure.nodes_of(GateRecord.from_json({"delegation": {"nodes": rows}})) for rows in (rows_then, rows_now)
    )
    assert then is not None and now is not None
    return structure.changes(then, now, structure.align(then, now))


def _alignment(rows_then: list[list[Any]], rows_now: list[list[Any]]) -> tuple[list, list, structure.Alignment]:
    then, now = (
        structure.nodes_of(GateRecord.from_json({"delegation": {"nodes": rows}})) or []
        for rows in (rows_then, rows_now)
    )
    return then, now, structure.align(then, now)


BASE = [f"w{k}" for k in range(9)]  # 27 children, as deep_autoencoder's
INSERTED = BASE[:6] + ["new"] + BASE[6:]  # a Linear+BN+ReLU before child 18, the later ones renumbered by 3
# the stretch the graph alone allows: .15's Linear(8, 128) is alike here, so every Linear but .0 could be the twin
STRETCH = (
    "encoder_decoder: 27 -> 30 blocks (3 added among encoder_decoder.1 to .29, which are alike: the graph cannot "
    "tell which; new names encoder_decoder.27, encoder_decoder.28, encoder_decoder.29)"
)


def test_an_insertion_into_a_sequential_is_named_where_it_was_made() -> None:
    assert _headline(sequential(BASE), sequential(INSERTED)) == [
        "encoder_decoder: 27 -> 30 blocks (3 inserted: encoder_decoder.18, .19, .20; "
        "encoder_decoder.18 to .26 moved to .21 to .29)"
    ]


def test_after_an_insertion_every_renumbered_node_is_paired_with_its_own_and_nothing_is_gone() -> None:
    then, now, found = _alignment(sequential(BASE), sequential(INSERTED))
    assert not found.gone
    assert sorted(now[j].name.split(":")[0] for j in found.new) == [f"encoder_decoder.{k}" for k in (18, 19, 20)]
    pairs = {then[i].name: now[j].name for i, j in found.pairs}
    assert pairs["encoder_decoder.18: " + LINEAR] == "encoder_decoder.21: " + LINEAR
    assert pairs["encoder_decoder.26: " + RELU] == "encoder_decoder.29: " + RELU
    assert pairs["output_layer: aten.linear.default"] == "output_layer: aten.linear.default"
    # and the pairs keep their weights: no renumbered Linear is judged against another's
    assert all(then[i].weights == now[j].weights for i, j in found.pairs)


def test_a_removal_from_a_sequential_is_named_where_it_was_made() -> None:
    assert _headline(sequential(INSERTED), sequential(BASE)) == [
        "encoder_decoder: 30 -> 27 blocks (3 removed: encoder_decoder.18, .19, .20; "
        "encoder_decoder.21 to .29 moved to .18 to .26)"
    ]


def test_two_insertions_are_each_named_and_the_renumbered_runs_apart() -> None:
    then, now = module_list(["a", "b", "c", "d"]), module_list(["a", "x", "b", "c", "y", "d"])
    assert _headline(then, now) == [
        "layers: 4 -> 6 blocks (2 inserted: layers.1, .4; layers.1 to .2 moved to .2 to .3, layers.3 moved to .5)"
    ]


def test_an_appended_block_among_alike_ones_is_named_by_its_weights() -> None:
    # issue 65 (EfficientSAM's 13th block): the one with weights never seen before is the one added
    assert _headline(module_list(["a", "b", "c"]), module_list(["a", "b", "c", "d"])) == [
        "layers: 3 -> 4 blocks (layers.3 added)"
    ]


def test_without_weights_an_appended_block_among_alike_ones_reads_the_stretch() -> None:
    assert _headline(module_list(["a", "b", "c"], weights=False), module_list(["a", "b", "c", "d"], weights=False)) == [
        "layers: 3 -> 4 blocks (1 added among layers.0 to .3, which are alike: the graph cannot tell which; "
        "new name layers.3)"
    ]


def test_a_reseeded_init_that_changed_every_weight_after_the_insertion_reads_the_stretch() -> None:
    # the blocks before the insertion kept their weights; every later Linear (and the output layer) has new ones,
    # so the weights cannot say which blocks are the old ones renumbered: the graph's stretch, as without weights
    reseeded = sequential(BASE[:6] + ["new"] + [f"{w}'" for w in BASE[6:]])
    reseeded[-1][4] = _hex("out'")
    assert _headline(sequential(BASE), reseeded) == [STRETCH]


def test_old_four_field_rows_read_as_they_always_did() -> None:
    then, now = sequential(BASE, weights=False), sequential(INSERTED, weights=False)
    assert _headline(then, now) == [STRETCH]
    nodes = structure.nodes_of(GateRecord.from_json({"delegation": {"nodes": then}})) or []
    assert nodes and not any(node.weighed or node.weights for node in nodes)


@pytest.mark.parametrize("old_side", ["baseline", "now"])
def test_an_old_baseline_against_new_rows_is_judged_as_two_old_ones(old_side: str) -> None:
    then, now = sequential(BASE, weights=old_side != "baseline"), sequential(INSERTED, weights=old_side != "now")
    old_then, old_now = sequential(BASE, weights=False), sequential(INSERTED, weights=False)
    assert _headline(then, now) == _headline(old_then, old_now) == [STRETCH]
    assert _alignment(then, now)[2] == _alignment(old_then, old_now)[2]


def test_rows_whose_nodes_read_no_weights_align_as_old_rows_do() -> None:
    # 5-field rows with no digest at all (a model with no parameters): nothing for weights to decide
    then, now = ([[*row[:4], None] for row in sequential(linears)] for linears in (BASE, INSERTED))
    assert _headline(then, now) == [STRETCH]


def test_the_counted_operators_pair_by_the_weights_of_the_nodes_they_implement() -> None:
    # one operator per Linear and ReLU (XNNPACK folds the BatchNorm), identities naming their graph nodes
    records = []
    for linears in (BASE, INSERTED):
        rows = sequential(linears)
        ops, ids = {}, {}
        for position, (name, *_) in enumerate(row for row in rows if NORM not in row[0]):
            op = f"{'Fully Connected' if 'linear' in name else 'Clamp'} #{position} @{position}"
            ops[op], ids[op] = [position, 1000], name
        records.append((GateRecord.from_json({"delegation": {"nodes": rows}}), ops, ids))
    (then, ops_then, ids_then), (now, ops_now, ids_now) = records
    pairs, gone, new = align_ops(ops_then, ops_now, ids_then, ids_now, (graph_of(then), graph_of(now)))
    assert not gone
    assert sorted(ids_now[op].split(":")[0] for op in new) == ["encoder_decoder.18", "encoder_decoder.20"]
    assert {ids_then[a]: ids_now[b] for a, b in pairs}["encoder_decoder.24: " + LINEAR] == (
        "encoder_decoder.27: " + LINEAR
    )


@pytest.mark.parametrize(
    "row, fits",
    [
        (["a: aten.relu.default", True, "float32", [1, 8]], True),  # before export format 5
        (["a: aten.relu.default", True, "float32", [1, 8], None], True),
        (["a: aten.linear.default", True, "float32", [1, 8], "0123456789abcdef"], True),
        (["a: aten.linear.default", True, "float32", [1, 8], "0123456789ABCDEF"], False),
        (["a: aten.linear.default", True, "float32", [1, 8], "0123456789abcde"], False),
        (["a: aten.linear.default", True, "float32", [1, 8], 12], False),
        (["a: aten.linear.default", True, "float32", [1, 8], None, None], False),
    ],
)
def test_a_baseline_row_has_four_fields_or_five_with_a_digest(row: list[Any], fits: bool) -> None:
    assert graph_node(row) is fits

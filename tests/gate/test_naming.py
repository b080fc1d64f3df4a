"""A baseline whose graph rows predate operator names (export format 6) is compared without its names (gate/naming.py):
pairing by the older names paired unlike operators, and an unchanged program read as regressions."""

from __future__ import annotations

from pytest_sme2.gate.naming import comparable_baseline, grouped_names
from pytest_sme2.gate.record import GateRecord

OLD_ROWS = [["attn: aten.view_copy.default [7]", True, "float32", [1, 4], None]]
NEW_ROWS = [["attn: aten.matmul.default", True, "float32", [1, 4], None, "attn: aten.matmul.default"]]


def _record(rows: list | None) -> GateRecord:
    return GateRecord.from_json(
        {
            "delegation": {"delegated_nodes": 1, "nodes": rows},
            "instructions": {"source": "qemu", "ops": {"BMM @3": [0, 10, 0]}, "op_identity": {"BMM @3": "attn: x"}},
        }
    )


def test_an_older_namings_baseline_loses_its_identities_and_nodes_for_the_comparison() -> None:
    baseline = _record(OLD_ROWS)
    compared = comparable_baseline(_record(NEW_ROWS), baseline)
    assert compared.delegation is not None and compared.delegation.nodes is None
    assert compared.delegation.delegated_nodes == 1
    assert compared.instructions is not None and compared.instructions.op_identity is None
    assert compared.instructions.ops == {"BMM @3": [0, 10, 0]}
    assert baseline.delegation is not None and baseline.delegation.nodes == OLD_ROWS  # not modified
    assert baseline.instructions is not None and baseline.instructions.op_identity is not None


def test_records_of_one_naming_and_records_without_rows_are_compared_as_they_are() -> None:
    new = _record(NEW_ROWS)
    assert comparable_baseline(_record(NEW_ROWS), new) is new
    old = _record(OLD_ROWS)
    assert comparable_baseline(_record(OLD_ROWS), old) is old
    rowless = _record(None)
    assert comparable_baseline(_record(NEW_ROWS), rowless) is rowless
    assert (grouped_names(new), grouped_names(old), grouped_names(rowless)) == (True, False, None)

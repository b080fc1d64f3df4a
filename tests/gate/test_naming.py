"""A baseline whose graph rows predate operator names (export format 6) is compared without its names (gate/naming.py):
pairing by the older names paired unlike operators, and an unchanged program read as regressions."""

from __future__ import annotations

import json

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


def test_a_real_counted_record_against_its_older_namings_baseline_passes_and_stale_names_would_not(
    tmp_path,  # noqa: ANN001 - pytest's tmp_path
) -> None:
    """transformer_encoder counted once (its attention is decomposed: shared handles). The baseline is the same
    record as the older naming would have left it: rows of five fields, and identities that name other operators
    (here: each operator's identity given to the next one of its kind). Judged through gate/naming.py it passes;
    the same stale identities on rows of the new naming are believed, and unlike operators are compared."""
    from pytest_sme2.gate.baselines import record_of
    from pytest_sme2.gate.judge import judge
    from tests.helpers_emulated import counted_profiles

    (profile,) = counted_profiles(tmp_path, "transformer_encoder", [True])
    current = record_of(profile).to_json()
    assert grouped_names(GateRecord.from_json(current))

    def stale(rows_of_new_naming: bool) -> dict:
        baseline = json.loads(json.dumps(current))
        identity = baseline["instructions"]["op_identity"]
        ops = sorted(identity, key=lambda op: baseline["instructions"]["ops"][op][0])
        names = [identity[op] for op in ops]
        for op, name in zip(ops, names[1:] + names[:1]):  # every identity one operator along
            identity[op] = name
        if not rows_of_new_naming:
            baseline["delegation"]["nodes"] = [row[:5] for row in baseline["delegation"]["nodes"]]
        return baseline

    label = "transformer_encoder fp32"
    verdicts = judge(label, current, stale(False))
    assert [v for v in verdicts if v.status.value == "regression"] == []
    assert any(v.status.value == "note" and "older naming" in v.message for v in verdicts)  # said, not silent
    believed = [v for v in judge(label, current, stale(True)) if v.status.value == "regression"]
    assert believed, "stale identities on new-naming rows should pair unlike operators"

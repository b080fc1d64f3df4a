"""A baseline whose operator names were made by an older naming is compared without them.

Export format 6 names the nodes a decomposition made from one operator after that operator
(evidence/identity.group_names: "blocks.0.attn: aten.matmul.default"); before it, each shared debug handle
took the name of whichever of its nodes came last ("blocks.0.attn: aten.view_copy.default [7]"). Pairing a
current record's operators with such a baseline's by name pairs unlike operators, and a run that changed nothing
reads as regressions. So a baseline of the older naming loses its operator identities and graph nodes for the
comparison, as a record of a pytest-sme2 before either existed: its operators pair by execution order
(checks/pairing.py, align_ops), which holds while the program is unchanged. Re-recording it restores pairing by
name.
"""

from __future__ import annotations

import dataclasses

from pytest_sme2.gate.record import GateRecord

OPERATOR_FIELD = 5  # the graph row's operator name (export/graph_nodes.py), from export format 6


def grouped_names(record: GateRecord) -> bool | None:
    """Whether the record's graph rows carry operator names (export format 6); None for a record without rows."""
    rows = None if record.delegation is None else record.delegation.nodes
    if not rows:
        return None
    return all(len(row) > OPERATOR_FIELD for row in rows)


def comparable_baseline(current: GateRecord, baseline: GateRecord) -> GateRecord:
    """``baseline`` as the checks may compare it with ``current``: without its operator identities and graph
    nodes when those were named by the older naming and the current record's by the new one."""
    if not (grouped_names(current) and grouped_names(baseline) is False):
        return baseline
    assert baseline.delegation is not None  # grouped_names found its rows
    delegation = dataclasses.replace(baseline.delegation, nodes=None)
    counts = baseline.instructions
    if counts is not None and counts.op_identity is not None:
        counts = dataclasses.replace(counts, op_identity=None)
    return dataclasses.replace(baseline, delegation=delegation, instructions=counts)

"""Structure of the delegate: graph nodes that left it (or new ones run outside it), and the delegated share of
the export-time graph's nodes. Exact, no statistics; docs/gate.md, "Structure".
"""

from __future__ import annotations

from pytest_sme2.gate import structure
from pytest_sme2.gate.checks.base import Check, Pair, pct, points_short
from pytest_sme2.gate.record import Delegation, GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Verdict


def _delegated_ops(label: str, current: GateRecord, baseline: GateRecord) -> Verdict:
    """Nodes that left the delegate. With both sides' graph nodes (structure.nodes_of) a node fell out only when
    it was delegated in the baseline and is not now; a new node outside the delegate fails too, unless the
    baseline's blocks ran the same node outside it (a layer added to a stack brings its own portable nodes).
    Records without graph nodes are compared by counts per operator type."""
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    new_portable = sorted(set(current.portable_ops or []) - set(baseline.portable_ops or []))
    if nodes_then is not None and nodes_now is not None:
        found = structure.align(nodes_then, nodes_now)
        fell_out = structure.fell_out(nodes_then, nodes_now, found)
        added = structure.new_outside(nodes_then, nodes_now, found)
        kernels = f" (portable kernel(s) new to the program: {', '.join(new_portable)})" if new_portable else ""
        parts = ([f"node(s) fell out of the delegate: {', '.join(fell_out)}"] if fell_out else []) + (
            [f"new node(s) run outside the delegate: {', '.join(added)}"] if added else []
        )
        evidence = Evidence({"fell_out": fell_out, "new_outside": added})
        if parts:
            return Verdict("delegated_ops", Status.REGRESSION, label, "; ".join(parts) + kernels, evidence)
        return Verdict("delegated_ops", Status.OK, label, "no node left the delegate", evidence)
    fell: list[str] = []
    ops_now = (current.delegation or Delegation()).ops or {}
    ops_then = (baseline.delegation or Delegation()).ops or {}
    for op, (_, outside_now) in sorted(ops_now.items()):
        outside_then = ops_then.get(op, [0, 0])[1]
        if outside_now > outside_then:
            fell.append(f"{op} ({outside_now - outside_then} more node(s) outside the delegate)")
    fell += [f"{op} (now runs as a portable kernel)" for op in new_portable]
    if fell:
        return Verdict(
            "delegated_ops",
            Status.REGRESSION,
            label,
            "operator(s) fell out of the delegate: " + "; ".join(fell),
            Evidence({"fell_out": fell}),
        )
    return Verdict("delegated_ops", Status.OK, label, "no operator left the delegate", Evidence({"fell_out": fell}))


# Stored fractions keep six significant digits (baselines.dumps): a fraction read back from a file can
# differ from the same fraction computed now by half a unit in the sixth digit.
_STORED_PRECISION = 1e-6


def _node_coverage(label: str, current: GateRecord, baseline: GateRecord) -> list[Verdict]:
    """The export-time graph's delegated share: judged on the node counts where both sides have them
    (exact), else on the stored fraction, up to its rounding."""
    nodes_now, nodes_then = current.node_delegation_coverage, baseline.node_delegation_coverage
    if nodes_now is None or nodes_then is None:
        return []
    counts_now, counts_then = (_node_counts(r) for r in (current, baseline))
    if counts_now is not None and counts_then is not None:
        dropped = counts_now[0] * sum(counts_then) < counts_then[0] * sum(counts_now)
    else:
        dropped = nodes_now < nodes_then - _STORED_PRECISION
    if dropped:
        counts = (
            f" ({counts_then[0]} of {sum(counts_then)} nodes -> {counts_now[0]} of {sum(counts_now)})"
            if counts_now is not None and counts_then is not None
            else ""
        )
        return [
            Verdict(
                "delegation_coverage",
                Status.REGRESSION,
                label,
                f"delegated share of graph nodes dropped from {pct(nodes_then)} to {pct(nodes_now)}{counts}",
                Evidence(
                    {"current": nodes_now, "baseline": nodes_then, "basis": "nodes"},
                    short=points_short("delegated graph nodes", nodes_now, nodes_then),
                ),
            )
        ]
    return []


def _node_counts(record: GateRecord) -> tuple[int, int] | None:
    """(delegated, not delegated) graph nodes of a record, None if it does not say."""
    delegation = record.delegation or Delegation()
    delegated, other = delegation.delegated_nodes, delegation.non_delegated_nodes
    if isinstance(delegated, int) and isinstance(other, int) and delegated + other > 0:
        return delegated, other
    return None


def _structure(pair: Pair) -> list[Verdict]:
    return [
        _delegated_ops(pair.label, pair.current, pair.baseline),
        *_node_coverage(pair.label, pair.current, pair.baseline),
    ]


CHECK = Check(
    ("delegated_ops", "delegation_coverage"), "docs/gate.md#structure", counted=_structure, measured=_structure
)

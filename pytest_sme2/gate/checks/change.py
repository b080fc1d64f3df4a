"""The change a person made, in their terms: blocks added or removed, an operator replaced, a dtype (from the
two programs' paired graph nodes, gate/structure.py), and the counted GEMM and convolution operators that grew.
A note the failing test's headline leads with (findings.py); docs/gate.md, "Structure".
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.evidence.categories import classify
from pytest_sme2.gate import structure
from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import MIN_OP_INSTRUCTIONS, counted_of
from pytest_sme2.gate.checks.pairing import op_kind, op_pairs
from pytest_sme2.gate.checks.provenance import moved_settings, unchanged_count
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict

# A heavy operator's growth is the same across blocks ("each") when its block instances grew within this much.
SAME_GROWTH = 0.05


def change_verdict(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> Verdict | None:
    """The change a person made, in their terms, from the two programs' paired graph nodes (structure.changes)
    and the counted GEMM and convolution operators that grew ("layers.*.up GEMMs +49% instructions each"): a
    note the failing test's headline leads with (findings.py). None when neither shows a change."""
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    parts = _settings_changed(current, baseline)  # the cause of the shapes and kernels below, when it changed
    parts += (
        []
        if nodes_then is None or nodes_now is None
        else structure.changes(nodes_then, nodes_now, structure.align(nodes_then, nodes_now))
    )
    parts += _grown_heavy_ops(current, baseline, tol)
    if not parts:
        return None
    evidence: dict[str, Any] = {"changes": parts}
    now, then = (None if r.instructions is None else r.instructions.per_inference for r in (current, baseline))
    if isinstance(now, (int, float)) and isinstance(then, (int, float)) and then:
        # what the change cost, said with it even where it made the whole smaller and something else failed
        evidence["moved"] = f"instructions per inference {now / then - 1:+.1%}"
    return Verdict("change", Status.NOTE, label, "; ".join(parts), Evidence(evidence))


def _settings_changed(current: GateRecord, baseline: GateRecord) -> list[str]:
    """Example inputs or the recipe changed since the baseline: what resized every node and operator after it,
    said first (issue 65: resnet8's input 32x32 -> 40x40 led with five CONV groups grown, the inputs fourth)."""
    moved = moved_settings(current, baseline)
    out = _upgrade(current, baseline, moved)
    if "inputs" in moved:
        then, now = moved["inputs"]
        shapes = [[str(i).split(" ")[0] for i in side] for side in (then, now)]
        if shapes[0] != shapes[1]:  # a dtype alone: the nodes' dtype line
            out.append(f"example inputs {', '.join(then)} -> {', '.join(now)}")
    if "recipe" in moved:
        then, now = moved["recipe"]
        keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
        out.append("recipe " + ", ".join(f"{k} {then.get(k)} -> {now.get(k)}" for k in keys))
    return out


# An upgrade's rerouted operators named in the headline, the most frequent first; the rest are counted.
SHOWN_REROUTES = 3


def _upgrade(current: GateRecord, baseline: GateRecord, moved: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """Another executorch or torch since the baseline, said first with what it changed in the program: graph nodes
    whose XNNPACK operators are others now (a kernel family replaced, "Convolution (NHWC, F32) IGEMM ->
    Convolution (NHWC, PF32) IGEMM") and the planned memory, when it moved (issue 66: an upgrade is a change the
    gate explains, in the terms a person reads, not a note under the checks). ``moved``: moved_settings."""
    versions = [f"{key} {moved[key][0]} -> {moved[key][1]}" for key in ("executorch", "torch") if key in moved]
    if not versions:
        return []
    parts = [_rerouted(current, baseline)]
    now, then = (None if r.memory is None else r.memory.planned_bytes for r in (current, baseline))
    if isinstance(now, (int, float)) and isinstance(then, (int, float)) and then and now != then:
        parts.append(f"planned memory {now / then - 1:+.1%}")
    said = [part for part in parts if part]
    if not said and unchanged_count(current, baseline) is not None:
        return []  # nothing moved: the provenance note says the upgrade left the count unchanged
    return [", ".join(versions) + (": " + "; ".join(said) if said else "")]


def _rerouted(current: GateRecord, baseline: GateRecord) -> str:
    """ "N operators run other XNNPACK operators (A -> B xK, ...)": graph nodes on both sides (op_identity) whose
    delegated operators' kinds differ. "" when none did or either side has no identities."""
    kinds: list[dict[str, list[str]]] = []
    for record in (baseline, current):
        by_node: dict[str, list[str]] = {}
        counts = counted_of(record)
        for op, node in ((None if counts is None else counts.op_identity) or {}).items():
            by_node.setdefault(node, []).append(op_kind(op))
        kinds.append({node: sorted(ops) for node, ops in by_node.items()})
    then, now = kinds
    rerouted: dict[str, int] = {}
    for node in then.keys() & now.keys():
        if then[node] != now[node]:
            text = f"{', '.join(dict.fromkeys(then[node]))} -> {', '.join(dict.fromkeys(now[node]))}"
            rerouted[text] = rerouted.get(text, 0) + 1
    if not rerouted:
        return ""
    ranked = sorted(rerouted.items(), key=lambda item: (-item[1], item[0]))
    shown = [f"{text} x{count}" if count > 1 else text for text, count in ranked[:SHOWN_REROUTES]]
    more = f", and {len(ranked) - SHOWN_REROUTES} more kinds" if len(ranked) > SHOWN_REROUTES else ""
    total = sum(rerouted.values())
    return f"{total} operator{'s' if total > 1 else ''} run other XNNPACK operators ({', '.join(shown)}{more})"


def _grown_heavy_ops(current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[str]:
    """The counted GEMM and convolution operators of resized graph nodes (a node's output shape changed: a wider
    FFN), by the node they implement with its block's index taken out, one phrase per category ("layers.*.up,
    layers.*.down GEMMs +36% to +44% instructions"). Without both sides' graph nodes, those that grew beyond
    the operator tolerance. An operator whose node kept its shape is left out: a layer removed before it moves
    it to the front of the program, where the first call's setup is counted in it, and that is no change of it.
    A block counts as resized when any of its nodes changed shape: the second linear of a wider FFN keeps its
    output's shape, its input grew."""
    now, then = counted_of(current), counted_of(baseline)
    if now is None or then is None or not then.op_identity or not now.op_identity:
        return []
    ops_then, ops_now, identity_then = then.ops or {}, now.ops or {}, then.op_identity
    nodes_then, nodes_now = structure.nodes_of(baseline), structure.nodes_of(current)
    resized = (
        None
        if nodes_then is None or nodes_now is None
        else {
            (structure.instance_of(nodes_then[i].name) or (None, nodes_then[i].name))[1]
            for i, j in structure.align(nodes_then, nodes_now).pairs
            if nodes_then[i].detail != nodes_now[j].detail
        }
    )
    grown: dict[str, dict[str, list[float]]] = {}
    for before, after in op_pairs(current, baseline)[0]:
        base, cur = float(ops_then[before][1]), float(ops_now[after][1])
        category = classify(before).category.value
        node_then = identity_then.get(before, before)
        grew = base > 0 and cur / base - 1 > tol.op_instructions
        if resized is not None:
            moved = grew and (structure.instance_of(node_then) or (None, node_then))[1] in resized
        else:
            moved = grew and cur - base > MIN_OP_INSTRUCTIONS
        if category in ("GEMM", "CONV") and moved:
            where = structure.generic(node_then.split(": ", 1)[0])
            grown.setdefault(category, {}).setdefault(where, []).append(cur / base - 1)
    out = []
    for category, by_node in grown.items():
        changes = [change for found in by_node.values() for change in found]
        low, high = min(changes), max(changes)
        amount = (
            f"{high:+.0%} instructions" + (" each" if len(changes) > 1 else "")
            if high - low <= SAME_GROWTH
            else f"{low:+.0%} to {high:+.0%} instructions"
        )
        out.append(f"{', '.join(by_node)} {category}s {amount}")
    return out


def _change(pair: Pair) -> list[Verdict]:
    found = change_verdict(pair.label, pair.current, pair.baseline, pair.tol)
    return [] if found is None else [found]


CHECK = Check(("change",), "docs/gate.md#structure", counted=_change, measured=_change)

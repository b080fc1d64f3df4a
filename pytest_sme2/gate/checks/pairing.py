"""Two records' counted operators paired: by the graph node each implements where both records name them
(evidence/identity.py, aligned as gate/structure.py aligns nodes), else by execution order. The operator,
change and modelled checks judge the same pairs.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Mapping

from pytest_sme2.evidence.categories import strip_instance
from pytest_sme2.gate import structure

# A kernel without its own profiling scope is named after its instruction (etdump.py: "OPERATOR_CALL[14]"): a
# position, which shifts with anything inserted before it, as "#N" and "@instruction" do
_POSITIONAL_CALL = re.compile(r"OPERATOR_CALL\[\d+\]")


def op_kind(name: str) -> str:
    """An operator's identity without its position: the event name without " #N", " @instruction" and an
    unscoped kernel's instruction ("OPERATOR_CALL[14]" is "OPERATOR_CALL")."""
    return _unpositioned(strip_instance(name.rsplit(" @", 1)[0]))


def _unpositioned(identity: str) -> str:
    """A name (an event's, an identity.py identity) with an unscoped kernel's instruction taken out."""
    return _POSITIONAL_CALL.sub("OPERATOR_CALL", identity)


def align_ops(
    ops_then: Mapping[str, Any],
    ops_now: Mapping[str, Any],
    ids_then: Mapping[str, str] | None = None,
    ids_now: Mapping[str, str] | None = None,
    graph: tuple[Mapping[str, structure.Node], Mapping[str, structure.Node]] = ({}, {}),
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Pairs (baseline op, current op), and the ops only one side has (each list in execution order).

    With both sides' identities (``op_identity``, identity.py: the graph node an operator implements)
    operators are paired by what they are in the graph (structure.align): by identity with a block's index
    taken out, whole blocks aligned as units, so an inserted layer is that layer's operators new and
    nothing after it, though every later layer is renamed and every later operator renumbered.
    ``graph``: each side's graph nodes by name (graph_of): their output shapes tell layers of different widths
    apart, and their weights digests tell renumbered blocks from inserted ones, as they do for the nodes. An
    operator that changed kind on the same node (a convolution now depthwise) stays paired, so a kernel-path
    change reads "X is now Y".

    Records of an older pytest-sme2 have no identities: their operators are paired as before, by aligning
    the two execution orders (difflib, on names without numbers) and pairing operators replaced one for
    one; a delegate split can pair the wrong operators there (counted_verdicts says so in a note).
    """
    then, now = (sorted(ops, key=lambda name: ops[name][0]) for ops in (ops_then, ops_now))
    if ids_then and ids_now:

        def items(
            names: list[str], ids: Mapping[str, str], nodes: Mapping[str, structure.Node]
        ) -> list[structure.Node]:
            weighed = any(node.weighed for node in nodes.values())
            out = []
            for n in names:
                node = nodes.get(ids.get(n, n))
                shape, weights = (node.detail, node.weights) if node else (None, None)
                out.append(
                    structure.Node(_unpositioned(ids.get(n, n)), True, None, (op_kind(n), shape), weights, weighed)
                )
            return out

        found = structure.align(items(then, ids_then, graph[0]), items(now, ids_now, graph[1]))
        pairs = [(then[i], now[j]) for i, j in found.pairs]
        return pair_anchorless(pairs, [then[i] for i in found.gone], [now[j] for j in found.new], ids_then, ids_now)
    matcher = difflib.SequenceMatcher(None, [op_kind(n) for n in then], [op_kind(n) for n in now], autojunk=False)
    pairs, gone, new = [], [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs += list(zip(then[i1:i2], now[j1:j2]))
        else:
            gone += then[i1:i2]
            new += now[j1:j2]
    return pairs, gone, new


def pair_anchorless(
    pairs: list[tuple[str, str]],
    gone: list[str],
    new: list[str],
    ids_then: Mapping[str, str],
    ids_now: Mapping[str, str],
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Operators with no graph node of their own are named after the last named operator before them
    (identity.py: "Mean (ND) Reduce2 after b2.conv: ..."), so a layer inserted before them renames them though
    they did not change. Left unpaired they read as gone and new under the same name and lose their own
    instruction check. Such operators are paired kind by kind, in execution order, when the
    baseline's unpaired ones of that kind are as many as the new ones now named after a node the baseline does
    not have (an inserted layer): an inserted block that brings its own operator of that kind makes the counts
    differ, and then nothing of that kind is paired (a wrong pair would judge one operator by another's
    instructions). A boundary transpose after a delegate split, named after a node both sides have, stays new."""
    nodes_then = set(ids_then.values())

    def anchor(identity: str) -> str | None:
        return identity.split(" after ", 1)[1] if " after " in identity else None

    by_kind_then: dict[str, list[str]] = {}
    by_kind_now: dict[str, list[str]] = {}
    for name in gone:
        if anchor(ids_then.get(name, "")) is not None:
            by_kind_then.setdefault(op_kind(name), []).append(name)
    for name in new:
        now_anchor = anchor(ids_now.get(name, ""))
        if now_anchor is not None and now_anchor not in nodes_then:
            by_kind_now.setdefault(op_kind(name), []).append(name)
    matched = [
        pair
        for kind, names in by_kind_then.items()
        if len(names) == len(by_kind_now.get(kind, []))
        for pair in zip(names, by_kind_now[kind])
    ]
    if not matched:
        return pairs, gone, new
    paired_then, paired_now = {a for a, _ in matched}, {b for _, b in matched}
    return ([*pairs, *matched], [n for n in gone if n not in paired_then], [n for n in new if n not in paired_now])


LEGACY_PAIRING = (
    "operators paired by execution order: the baseline was recorded by an older pytest-sme2 without "
    "operator identities, so after a delegate split or an inserted operator some pairs can be wrong; "
    "record the baseline again with --sme2-update-baselines to pair them by graph node"
)


def graph_of(record: Mapping[str, Any]) -> dict[str, structure.Node]:
    """Graph node name -> the node (its output shape and weights), of a record with graph nodes (empty for one
    without)."""
    return {node.name: node for node in structure.nodes_of(record) or ()}


def op_pairs(
    current: Mapping[str, Any], baseline: Mapping[str, Any], keep_now: Any = None, keep_then: Any = None
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """The counted operators of two records paired (align_ops); ``keep_*``: only operators named there."""
    now, then = (record.get("instructions") or {} for record in (current, baseline))
    ops_now = {k: v for k, v in (now.get("ops") or {}).items() if keep_now is None or k in keep_now}
    ops_then = {k: v for k, v in (then.get("ops") or {}).items() if keep_then is None or k in keep_then}
    return align_ops(
        ops_then, ops_now, then.get("op_identity"), now.get("op_identity"), (graph_of(baseline), graph_of(current))
    )

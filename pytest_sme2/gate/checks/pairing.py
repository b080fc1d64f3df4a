"""Two records' counted operators paired: by the graph node each implements where both records name them
(evidence/identity.py, aligned as gate/structure.py aligns nodes), else by execution order. The operator,
change and modelled checks judge the same pairs.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Mapping, NamedTuple

from pytest_sme2.evidence.categories import strip_instance
from pytest_sme2.gate import structure
from pytest_sme2.gate.record import Counts, GateRecord

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
        gone, new = [then[i] for i in found.gone], [now[j] for j in found.new]
        return pair_anchorless(pairs, gone, new, Side(then, ids_then, ops_then), Side(now, ids_now, ops_now))
    matcher = difflib.SequenceMatcher(None, [op_kind(n) for n in then], [op_kind(n) for n in now], autojunk=False)
    pairs, gone, new = [], [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs += list(zip(then[i1:i2], now[j1:j2]))
        else:
            gone += then[i1:i2]
            new += now[j1:j2]
    return pairs, gone, new


class Side(NamedTuple):
    """One record's counted operators, as pair_anchorless reads them."""

    order: list[str]  # operator names in execution order
    ids: Mapping[str, str]  # name -> identity (identity.py)
    ops: Mapping[str, Any]  # name -> [position, instructions, ...]


def pair_anchorless(
    pairs: list[tuple[str, str]], gone: list[str], new: list[str], then: Side, now: Side
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Operators with no graph node of their own are named after the last named operator before them
    (identity.py: "Mean (ND) Reduce2 after b2.conv: ..."), so a layer inserted before them renames them though
    they did not change. Left unpaired they read as gone and new under the same name and lose their own
    instruction check. Three rules pair them, kind by kind in execution order, each on what the one before
    left over:

    1. Both stand before the same named node (the first operator after them with a node of its own), one both
       sides have: an unchanged operator before ``head`` is itself though it now follows an inserted layer.
    2. The baseline's unpaired ones of a kind are as many as the new ones now named after a node the baseline
       does not have (an inserted layer before them); where the counts differ nothing is paired by this rule.
    3. Both count exactly alike (every counted quantity): an operator that only moved is no change at all,
       and judging it by its twin's instructions cannot be wrong. EfficientSAM's two small Multiplies (119
       instructions each) run after the last encoder block's norm1, so they move into an appended block,
       beside Multiplies of the block's own.

    What is left stays gone and new: a wrong pair would judge one operator by another's instructions. A
    boundary transpose after a delegate split, named after a node both sides have, with no twin in the
    baseline, stays new."""
    nodes_then = set(then.ids.values())
    named_both = nodes_then & set(now.ids.values())
    matched = _pair_by_key(_anchorless(gone, then, named_both), _anchorless(new, now, named_both))
    left_then, left_now = _unpaired(gone, new, matched)
    after_new_node = [n for n in left_now if _anchor(now.ids.get(n, "")) not in nodes_then]
    matched += _pair_by_key(_anchorless(left_then, then, None), _anchorless(after_new_node, now, None))
    left_then, left_now = _unpaired(gone, new, matched)
    matched += _pair_twins(_anchorless(left_then, then, None), _anchorless(left_now, now, None), then, now)
    left_then, left_now = _unpaired(gone, new, matched)
    return [*pairs, *matched], left_then, left_now


def _unpaired(gone: list[str], new: list[str], matched: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``gone`` and ``new`` without the operators ``matched`` pairs."""
    paired_then, paired_now = {a for a, _ in matched}, {b for _, b in matched}
    return [n for n in gone if n not in paired_then], [n for n in new if n not in paired_now]


def _pair_twins(
    then: Mapping[tuple[str, str | None], list[str]],
    now: Mapping[tuple[str, str | None], list[str]],
    side_then: Side,
    side_now: Side,
) -> list[tuple[str, str]]:
    """Rule 3 of pair_anchorless: each baseline operator with the first one now of its kind that counts exactly
    alike (everything but the position), each used once."""
    out = []
    for key, names in then.items():
        free = list(now.get(key, ()))
        for name in names:
            twin = next((n for n in free if list(side_now.ops[n][1:]) == list(side_then.ops[name][1:])), None)
            if twin is not None:
                free.remove(twin)
                out.append((name, twin))
    return out


def _anchor(identity: str) -> str | None:
    """The named node an anchorless operator's identity is named after (None for a node's own operator)."""
    return identity.split(" after ", 1)[1] if " after " in identity else None


def _anchorless(names: list[str], side: Side, before: set[str] | None) -> dict[tuple[str, str | None], list[str]]:
    """The anchorless ones of ``names`` in execution order, by (kind, the next named node after them) where that
    node is one of ``before`` (the others left out); ``before=None``: by kind alone."""
    following = _next_named(side) if before is not None else {}
    out: dict[tuple[str, str | None], list[str]] = {}
    wanted = set(names)
    for name in side.order:
        if name not in wanted or _anchor(side.ids.get(name, "")) is None:
            continue
        nxt = following.get(name)
        if before is not None and nxt not in before:
            continue
        out.setdefault((op_kind(name), nxt), []).append(name)
    return out


def _next_named(side: Side) -> dict[str, str | None]:
    """Each operator's next named node in execution order: the identity of the first later operator with a graph
    node of its own (None after the last)."""
    following: dict[str, str | None] = {}
    upcoming: str | None = None
    for name in reversed(side.order):
        following[name] = upcoming
        identity = side.ids.get(name, "")
        if identity and _anchor(identity) is None:
            upcoming = identity
    return following


def _pair_by_key(
    then: Mapping[tuple[str, str | None], list[str]], now: Mapping[tuple[str, str | None], list[str]]
) -> list[tuple[str, str]]:
    """Pairs in execution order of each key the two sides have as many operators of."""
    return [pair for key, names in then.items() if len(names) == len(now.get(key, ())) for pair in zip(names, now[key])]


LEGACY_PAIRING = (
    "operators paired by execution order: the baseline was recorded by an older pytest-sme2 without "
    "operator identities, or with the names of an older naming (before export format 6, gate/naming.py), so "
    "after a delegate split or an inserted operator some pairs can be wrong; "
    "record the baseline again with --sme2-update-baselines to pair them by graph node"
)


def graph_of(record: GateRecord) -> dict[str, structure.Node]:
    """Graph node name -> the node (its output shape and weights), of a record with graph nodes (empty for one
    without)."""
    return {node.name: node for node in structure.nodes_of(record) or ()}


def op_pairs(
    current: GateRecord, baseline: GateRecord, keep_now: Any = None, keep_then: Any = None
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """The counted operators of two records paired (align_ops); ``keep_*``: only operators named there."""
    now, then = (record.instructions or Counts() for record in (current, baseline))
    ops_now = {k: v for k, v in (now.ops or {}).items() if keep_now is None or k in keep_now}
    ops_then = {k: v for k, v in (then.ops or {}).items() if keep_then is None or k in keep_then}
    return align_ops(ops_then, ops_now, then.op_identity, now.op_identity, (graph_of(baseline), graph_of(current)))

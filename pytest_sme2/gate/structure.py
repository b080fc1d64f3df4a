"""Two programs' graph nodes (or operators) paired by what they are in the graph, and the change in a person's terms.

Names alone do not pair a changed program with its baseline: a layer inserted into a ``ModuleList`` renames
every later layer (``layers.1`` becomes ``layers.2``), and positions (instruction ids, ``#N`` instance
numbers) shift with anything inserted before them. So blocks are paired by their names first (a block that kept
its name and its nodes is itself: an appended block is the one with the new name), and where names do not
decide, names are compared with their block index taken out
(``layers.*.up: aten.linear.default``), whole blocks (the nodes of one ``layers.N``) are aligned as units by a
sequence alignment (difflib), first with each node's output shape, so that of layers of different widths the
inserted one is the one called added, then without it, so that a widened or otherwise changed block still
pairs with its own. An inserted block then reads as that block added, and nothing after it as new or changed.

Blocks alike in the graph (same nodes, same shapes) cannot be told apart that way: an ``nn.Sequential`` renumbers
every child after an insertion, and deep_autoencoder's inserted Linear+BatchNorm+ReLU made the same program as the
three appended (issue 65). Their weights can: where both records carry each node's weights digest (export format
5, export/graph_nodes.py), blocks whose weights are found once on each side are paired by them first (the most
such pairs that keep one order on both sides), and the stretches between them are aligned as above. A
renumbered block then keeps its own pair under its new name, the inserted ones are the blocks whose weights the
baseline never had, and blocks beside them that read no weights or the same weights (a ReLU, an untrained
BatchNorm) are placed by their names. Where weights do not decide (records without digests, or an init re-seeded so
that every weight after the insertion changed), the alignment is the one above, unchanged.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from pytest_sme2.evidence.identity import ROOT
from pytest_sme2.gate.record import GateRecord

_INDEX = re.compile(r"(?:^|(?<=\.))\d+(?=\.|$)")


@dataclass(frozen=True)
class Node:
    """One graph node (or counted operator) as a record names it; ``detail`` tells same-named ones apart."""

    name: str  # "layers.1.up: aten.linear.default", or an operator's identity ("Add (ND) after layers.1.down: ...")
    delegated: bool = True
    dtype: str | None = None
    detail: Hashable = None  # nodes: the output shape; operators: their kind
    weights: str | None = None  # the digest of the weights the node reads, None for none (or not recorded)
    weighed: bool = False  # its record keeps weights digests (export format 5), so None means it reads none


def nodes_of(record: GateRecord | None) -> list[Node] | None:
    """A record's graph nodes (``delegation.nodes``, export/graph_nodes.py), None for a record without them. A row
    has a 5th field, the node's weights digest, from export format 5 (older records' rows have four), and a 6th,
    its operator's name, from export format 6 (gate/naming.py reads it)."""
    rows = None if record is None or record.delegation is None else record.delegation.nodes
    if not rows:
        return None
    return [
        Node(
            row[0],
            bool(row[1]),
            row[2],
            None if row[3] is None else tuple(row[3]),
            weights=row[4] if len(row) > 4 else None,
            weighed=len(row) > 4,
        )
        for row in rows
    ]


def _path(name: str) -> str:
    """The module path of a node name; of an operator named after another node, that node's."""
    node = name.split(" after ", 1)[1] if " after " in name else name
    return node.split(": ", 1)[0]


def instance_of(name: str) -> tuple[str, str] | None:
    """(family, instance) of a node in a repeated block: ("layers", "layers.1") for ``layers.1.up: ...``;
    None for one outside any (a path without a numeric part)."""
    parts = _path(name).split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i]) or ROOT, ".".join(parts[: i + 1])
    return None


def generic(name: str) -> str:
    """The name with its block's index replaced by ``*``: the same for the same node of every block."""
    found = instance_of(name)
    if found is None:
        return name
    family, instance = found
    starred = f"{family}.*" if family != ROOT else "*"
    return re.sub(rf"(?<![\w.]){re.escape(instance)}(?=[.:]|$)", starred, name, count=1)


@dataclass
class Alignment:
    """Which node of the baseline is which node now (indices into each list), and the blocks added or removed."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    new: list[int] = field(default_factory=list)
    instances: dict[str, str] = field(default_factory=dict)  # baseline instance -> its instance now
    added: dict[str, list[str]] = field(default_factory=dict)  # family -> instances only now has
    removed: dict[str, list[str]] = field(default_factory=dict)  # family -> instances only the baseline has
    blocks: dict[str, tuple[int, int]] = field(default_factory=dict)  # family -> (instances then, now)
    # family -> runs of added (or removed) blocks that could as well be others beside them: (the run's names,
    # the first and last block of the stretch of alike blocks they are among), see _alike_stretch
    added_among: dict[str, list[tuple[list[str], str, str]]] = field(default_factory=dict)
    removed_among: dict[str, list[tuple[list[str], str, str]]] = field(default_factory=dict)
    # family -> (baseline instance, its instance now) of its renumbered blocks, where weights paired some of them
    moved: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Unit:
    instance: str | None
    family: str | None
    members: tuple[int, ...]


def _units(nodes: Sequence[Node]) -> list[_Unit]:
    """The nodes of each block instance, one unit each in the order of its first node; a node outside any block is
    a unit of its own. A block's nodes need not be consecutive: ExecuTorch's LLM export runs some of every layer's
    operators (the KV cache's position scalars) before the first layer's norm, which split each layer in two and
    read as layer 0's operators gone and new (issue 65)."""
    units: list[_Unit] = []
    where: dict[str, int] = {}
    for index, node in enumerate(nodes):
        found = instance_of(node.name)
        if found is None:
            units.append(_Unit(None, None, (index,)))
        elif found[1] in where:
            last = units[where[found[1]]]
            units[where[found[1]]] = _Unit(last.instance, last.family, last.members + (index,))
        else:
            where[found[1]] = len(units)
            units.append(_Unit(found[1], found[0], (index,)))
    return units


def align(then: Sequence[Node], now: Sequence[Node]) -> Alignment:
    """The baseline's nodes paired with the current ones, block by block (see the module's docstring)."""
    units_then, units_now = _units(then), _units(now)

    def signature(nodes: Sequence[Node], with_detail: bool) -> Callable[[_Unit], Hashable]:
        return lambda unit: (
            unit.family if unit.instance else generic(nodes[unit.members[0]].name),
            tuple((generic(nodes[i].name), nodes[i].detail if with_detail else None) for i in unit.members),
        )

    def named(nodes: Sequence[Node]) -> Callable[[_Unit], Hashable]:
        return lambda unit: (
            unit.instance or nodes[unit.members[0]].name,
            tuple((nodes[i].name, nodes[i].detail) for i in unit.members),
        )

    out = Alignment()
    # names first: a block that kept its name and its nodes is itself (an appended block is the new name, not
    # the first of twelve alike: EfficientSAM's 13th encoder block read "blocks.0 added", issue 65); where names
    # do not decide (a renumbered ModuleList), structure with output shapes, then structure alone
    keys = [(named(then), named(now)), (signature(then, True), signature(now, True))]
    keys.append((signature(then, False), signature(now, False)))
    # before all of them, where both records keep weights digests: blocks paired by their weights, and the
    # stretches between those pairs aligned as above (without any, the whole program is one stretch)
    weighs = any(n.weighed for n in then) and any(n.weighed for n in now)
    weights_then, weights_now = (
        [_weights(nodes, u) for u in units] for nodes, units in ((then, units_then), (now, units_now))
    )
    anchors = _weight_anchors(weights_then, weights_now) if weighs else []
    unit_pairs = [(units_then[i], units_now[j]) for i, j in anchors]
    for (i0, j0), (i1, j1) in zip([(-1, -1), *anchors], [*anchors, (len(units_then), len(units_now))]):
        pairs, left_then, left_now = _pair_units(units_then[i0 + 1 : i1], units_now[j0 + 1 : j1], keys)
        unit_pairs += pairs + _pair_changed_blocks(left_then, left_now)
    by_weights = {units_then[i].family for i, j in anchors if units_then[i].instance != units_now[j].instance}
    for before, after in unit_pairs:
        if before.family in by_weights and before.instance != after.instance and after.family == before.family:
            out.moved.setdefault(before.family or ROOT, []).append((str(before.instance), str(after.instance)))
    paired_then = {u.members for u, _ in unit_pairs}
    paired_now = {u.members for _, u in unit_pairs}
    for before, after in unit_pairs:
        if before.instance and after.instance:
            out.instances[before.instance] = after.instance
        _pair_members(then, now, before.members, after.members, out)
    singles_then = [i for u in units_then if u.members not in paired_then and not u.instance for i in u.members]
    singles_now = [j for u in units_now if u.members not in paired_now and not u.instance for j in u.members]
    _pair_members(then, now, tuple(singles_then), tuple(singles_now), out)
    out.gone += [i for u in units_then if u.members not in paired_then and u.instance for i in u.members]
    out.new += [j for u in units_now if u.members not in paired_now and u.instance for j in u.members]
    for nodes, units, paired, into, among, own, other in (
        (then, units_then, paired_then, out.removed, out.removed_among, weights_then, weights_now),
        (now, units_now, paired_now, out.added, out.added_among, weights_now, weights_then),
    ):
        for unit in units:
            if unit.instance and unit.members not in paired:
                into.setdefault(unit.family or ROOT, []).append(unit.instance)
        known = set(other)
        unknown = {k for k, weights in enumerate(own) if weights and weights not in known} if weighs else set()
        placed = _placed_by_weights(units, paired, unknown)
        for stretch_family, run, first, last in _alike_stretches(units, paired, signature(nodes, True), nodes, placed):
            among.setdefault(stretch_family, []).append((run, first, last))
    for family in {u.family for u in units_then + units_now if u.instance}:
        count = [len({u.instance for u in units if u.family == family}) for units in (units_then, units_now)]
        out.blocks[family or ROOT] = (count[0], count[1])
    out.pairs.sort()
    out.gone.sort()
    out.new.sort()
    return out


def _pair_units(
    then: list[_Unit], now: list[_Unit], keys: list[tuple[Callable[[_Unit], Hashable], Callable[[_Unit], Hashable]]]
) -> tuple[list[tuple[_Unit, _Unit]], list[_Unit], list[_Unit]]:
    """Units paired by the first key's sequence alignment, each region it leaves unpaired by the next key's; what
    the last leaves is returned unpaired (then, now)."""
    if not keys or not then or not now:
        return [], list(then), list(now)
    (key_then, key_now), rest = keys[0], keys[1:]
    matcher = difflib.SequenceMatcher(None, [key_then(u) for u in then], [key_now(u) for u in now], autojunk=False)
    pairs: list[tuple[_Unit, _Unit]] = []
    left_then: list[_Unit] = []
    left_now: list[_Unit] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs += zip(then[i1:i2], now[j1:j2])
            continue
        more, unpaired_then, unpaired_now = _pair_units(then[i1:i2], now[j1:j2], rest)
        pairs += more
        left_then += unpaired_then
        left_now += unpaired_now
    return pairs, left_then, left_now


def _placed_by_weights(
    units: list[_Unit], paired: set[tuple[int, ...]], unknown: set[int]
) -> Callable[[range, range], bool]:
    """Whether a run of unpaired units (indices) is where its weights say, given the stretch of alike units it could
    slide over and ``unknown``, the units whose weights the other record never had. It is when it holds such a
    unit (blocks beside it that read no weights, or the same, are then placed by their names), unless a unit of the
    stretch was paired though its weights changed: then weights did not pair the stretch (an init re-seeded)."""

    def placed(run: range, stretch: range) -> bool:
        changed = any(k in unknown and units[k].members in paired for k in stretch)
        return bool(unknown & set(run)) and not changed

    return placed


def _weights(nodes: Sequence[Node], unit: _Unit) -> tuple[str, ...]:
    """The weights digests of a block's nodes that read any, in order: empty for a block that reads none."""
    return tuple(str(nodes[i].weights) for i in unit.members if nodes[i].weights)


def _weight_anchors(then: list[tuple[str, ...]], now: list[tuple[str, ...]]) -> list[tuple[int, int]]:
    """Units paired by their weights (indices into each list): each unit whose weights are found once on each
    side, the most such pairs that keep one order on both sides (a block moved against that order is left to the
    alignment by names and structure). An untrained BatchNorm's weights, the same in every one, pair none."""
    count_then, count_now = Counter(then), Counter(now)
    where_now = {weights: j for j, weights in enumerate(now) if weights and count_now[weights] == 1}
    found = [(i, where_now[w]) for i, w in enumerate(then) if w and count_then[w] == 1 and w in where_now]
    # the longest increasing subsequence of current indices (patience sorting): tails[k] is the pair (its place in
    # found) ending the best one of length k + 1 so far, ends[k] its current index, before[p] the pair before p
    tails: list[int] = []
    ends: list[int] = []
    before: list[int] = []
    for position, (_, j) in enumerate(found):
        k = bisect.bisect_left(ends, j)
        before.append(tails[k - 1] if k else -1)
        tails[k : k + 1], ends[k : k + 1] = [position], [j]
    run, position = [], tails[-1] if tails else -1
    while position >= 0:
        run.append(found[position])
        position = before[position]
    return run[::-1]


def _alike_stretches(
    units: list[_Unit],
    paired: set[tuple[int, ...]],
    key: Callable[[_Unit], Hashable],
    nodes: Sequence[Node],
    placed: Callable[[range, range], bool],
) -> list[tuple[str, list[str], str, str]]:
    """Runs of unpaired blocks that could as well be other blocks beside them: (family, the run's names, the first
    and last block of the stretch they slide over). Blocks alike in the graph (same nodes, same shapes) cannot be
    told apart from it: inserting one into ``Sequential`` or ``ModuleList`` renumbers every later one, so the
    inserted ``.18`` and an appended ``.27`` make the same program, and names say the new name, not which block is
    new (issue 65: deep_autoencoder's inserted Linear+BN+ReLU read as the last three added). A run that cannot
    slide (a block unlike its neighbours) is not listed: its name is the block added. Alike includes what a block
    takes in, the output shape of the block before it (a record keeps only output shapes): deep_autoencoder's
    Linear(8, 128) and Linear(128, 128) both give 1x128, but only the second can be the inserted one's twin.
    ``placed(run, stretch)`` (unit indices): the run's weights say where it is, so it is not listed."""

    def alike(i: int, j: int) -> bool:
        def taken(k: int) -> Hashable:
            return nodes[units[k - 1].members[-1]].detail if k > 0 else None

        return key(units[i]) == key(units[j]) and taken(i) == taken(j)

    out = []
    index = 0
    while index < len(units):
        unit = units[index]
        if not unit.instance or unit.members in paired:
            index += 1
            continue
        end = index
        while end + 1 < len(units) and units[end + 1].instance and units[end + 1].members not in paired:
            if units[end + 1].family != unit.family:
                break
            end += 1
        size = end - index + 1
        low, high = index, index  # where the run may start, as far as alike blocks let it slide
        while low > 0 and units[low - 1].family == unit.family and alike(low - 1, low - 1 + size):
            low -= 1
        while high + size < len(units) and units[high + size].family == unit.family and alike(high, high + size):
            high += 1
        if (low, high) != (index, index) and not placed(range(index, end + 1), range(low, high + size)):
            run = [str(u.instance) for u in units[index : end + 1]]
            out.append((unit.family or ROOT, run, str(units[low].instance), str(units[high + size - 1].instance)))
        index = end + 1
    return out


def _pair_changed_blocks(then: list[_Unit], now: list[_Unit]) -> list[tuple[_Unit, _Unit]]:
    """Blocks left unpaired whose contents changed (an activation replaced in every layer): paired in order within
    each family, as many as both sides have; the rest of a family are the blocks added or removed."""
    pairs: list[tuple[_Unit, _Unit]] = []
    for family in dict.fromkeys(u.family for u in then if u.instance):
        before = [u for u in then if u.family == family and u.instance]
        after = [u for u in now if u.family == family and u.instance]
        pairs += zip(before, after)
    return pairs


def _pair_members(
    then: Sequence[Node], now: Sequence[Node], before: tuple[int, ...], after: tuple[int, ...], out: Alignment
) -> None:
    """Nodes of two paired blocks (or of the nodes outside blocks): equal generic names pair, and so does a node
    replaced one for one on the same module path (``layers.0.act``: relu now gelu)."""
    matcher = difflib.SequenceMatcher(
        None, [generic(then[i].name) for i in before], [generic(now[j].name) for j in after], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.pairs += zip(before[i1:i2], after[j1:j2])
            continue
        rest_now = list(after[j1:j2])
        for i in before[i1:i2]:
            same_place = next((j for j in rest_now if _path(now[j].name) == _path(then[i].name)), None)
            if same_place is None:
                out.gone.append(i)
            else:
                out.pairs.append((i, same_place))
                rest_now.remove(same_place)
        out.new += rest_now


def _target(name: str) -> str:
    """``relu`` of ``layers.0.act: aten.relu.default``."""
    target = name.split(": ", 1)[1] if ": " in name else name
    target = re.sub(r" \[\d+\]$", "", target)
    return target.removeprefix("aten.").removesuffix(".default").removesuffix(".Tensor")


def changes(then: Sequence[Node], now: Sequence[Node], alignment: Alignment) -> list[str]:
    """What a person changed, in their terms, from the paired nodes: blocks added or removed, an operator replaced
    on the same module path, the dtype, nodes added or removed outside any block."""
    out = []
    for family, (before, after) in sorted(alignment.blocks.items()):
        added, removed = alignment.added.get(family, []), alignment.removed.get(family, [])
        moved = alignment.moved.get(family, [])
        if added or removed:
            which = "; ".join(
                part
                for part in (
                    _which(added, alignment.added_among.get(family, []), "inserted" if moved else "added", bool(moved)),
                    _which(removed, alignment.removed_among.get(family, []), "removed", bool(moved)),
                    _moves(moved),
                )
                if part
            )
            out.append(f"{family}: {before} -> {after} blocks ({which})")
    replaced: dict[tuple[str, str, str], list[str]] = {}
    dtypes: Counter[tuple[str, str]] = Counter()
    for i, j in alignment.pairs:
        if _target(then[i].name) != _target(now[j].name):
            key = (generic(_path(then[i].name)), _target(then[i].name), _target(now[j].name))
            replaced.setdefault(key, []).append(_path(now[j].name))
        dtype_then, dtype_now = then[i].dtype, now[j].dtype
        if dtype_then and dtype_now and dtype_then != dtype_now:
            dtypes[(dtype_then, dtype_now)] += 1
    for (where, old, new), places in replaced.items():
        out.append(f"{where}: {old} -> {new}" + (f" in {len(places)} blocks" if len(places) > 1 else ""))
    for (old, new), count in dtypes.most_common():
        out.append(f"dtype {old} -> {new} ({count} of {len(alignment.pairs)} paired nodes)")
    in_blocks = {instance for names in alignment.added.values() for instance in names}
    loose_new = [now[j].name for j in alignment.new if (instance_of(now[j].name) or ("", ""))[1] not in in_blocks]
    if loose_new:
        out.append("new node(s): " + _some(loose_new))
    out_blocks = {instance for names in alignment.removed.values() for instance in names}
    loose_gone = [then[i].name for i in alignment.gone if (instance_of(then[i].name) or ("", ""))[1] not in out_blocks]
    if loose_gone:
        out.append("node(s) gone: " + _some(loose_gone))
    return out


def _which(names: list[str], among: list[tuple[list[str], str, str]], verb: str, counted: bool) -> str:
    """``layers.1 added`` (``counted``: ``1 inserted: layers.1``, beside the blocks renumbered); of blocks alike
    their neighbours, how many among which, and the names that are new (or gone), since the graph cannot say which
    of the alike blocks is the one added."""
    if not names:
        return ""
    name_word, names_word = ("name gone", "names gone") if verb == "removed" else ("new name", "new names")
    vague = {name for run, _, _ in among for name in run}
    plain = [n for n in names if n not in vague]
    parts = []
    if plain:
        parts.append(f"{len(plain)} {verb}: {_span(plain)}" if counted else f"{', '.join(plain)} {verb}")
    for run, first, last in among:
        parts.append(
            f"{len(run)} {verb} among {first} to {_tail(last)}, which are alike: the graph cannot tell which; "
            f"{names_word if len(run) > 1 else name_word} {', '.join(run)}"
        )
    return "; ".join(parts)


def _tail(instance: str) -> str:
    """``.26`` of ``encoder_decoder.26``: a block's index after its family's first mention (``3`` of a root one)."""
    family, _, index = instance.rpartition(".")
    return f".{index}" if family else instance


def _span(instances: list[str]) -> str:
    """``encoder_decoder.18, .19, .20``."""
    return ", ".join([instances[0], *map(_tail, instances[1:])])


def _moves(moved: list[tuple[str, str]]) -> str:
    """The renumbered blocks as runs: ``encoder_decoder.18 to .26 moved to .21 to .29`` (``layers.2 moved to .1``
    for one), runs apart joined by commas."""

    def index(instance: str) -> int:
        return int(instance.rpartition(".")[2])

    runs: list[list[tuple[str, str]]] = []
    for then, now in sorted(moved, key=lambda pair: index(pair[0])):
        last = runs[-1][-1] if runs else None
        if last and index(then) == index(last[0]) + 1 and index(now) == index(last[1]) + 1:
            runs[-1].append((then, now))
        else:
            runs.append([(then, now)])
    return ", ".join(
        f"{run[0][0]} moved to {_tail(run[0][1])}"
        if len(run) == 1
        else f"{run[0][0]} to {_tail(run[-1][0])} moved to {_tail(run[0][1])} to {_tail(run[-1][1])}"
        for run in runs
    )


def fell_out(then: Sequence[Node], now: Sequence[Node], alignment: Alignment) -> list[str]:
    """Nodes delegated in the baseline that run outside the delegate now."""
    return [now[j].name for i, j in alignment.pairs if then[i].delegated and not now[j].delegated]


def new_outside(then: Sequence[Node], now: Sequence[Node], alignment: Alignment) -> list[str]:
    """New nodes that run outside the delegate, except those the baseline's blocks also ran outside it (a layer
    added to a stack brings its own portable nodes, as the other layers have them)."""
    outside_then = {generic(node.name) for node in then if not node.delegated}
    return [now[j].name for j in alignment.new if not now[j].delegated and generic(now[j].name) not in outside_then]


def _some(names: Sequence[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")

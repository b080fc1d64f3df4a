"""Counted operators (emulated target): each operator's instructions against the baseline's, operators paired by
the graph node they implement (pairing.py); which grew, which lost their SME kernels, which appeared or went; and
the SME/SME2 kernels the whole program no longer executes. docs/gate.md, "On the emulated target the gate is
deterministic".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_sme2.gate import structure
from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import MIN_OP_INSTRUCTIONS, counted_of, counts_of
from pytest_sme2.gate.checks.pairing import LEGACY_PAIRING, op_kind, op_pairs
from pytest_sme2.gate.record import Counts, GateRecord
from pytest_sme2.gate.verdict import Evidence, Kind, Status, Tolerances, Verdict


@dataclass(frozen=True)
class _Counted:
    """The two sides' counted operators and their graph identities, with the label and tolerances: what every
    helper of _op_instructions reads."""

    label: str
    tol: Tolerances
    ops_now: Mapping[str, Any]
    ops_then: Mapping[str, Any]
    ids_now: Mapping[str, str] | None
    ids_then: Mapping[str, str] | None


def _op_instructions(label: str, current: GateRecord, baseline: GateRecord, tol: Tolerances) -> list[Verdict]:
    """Each operator's instructions against the baseline's, operators paired by identity (align_ops): which
    got more expensive, which lost their SME kernels, and which appeared or disappeared."""
    now, then = counted_of(current) or Counts(), counted_of(baseline) or Counts()
    ops = _Counted(label, tol, now.ops or {}, then.ops or {}, now.op_identity, then.op_identity)
    pairs, gone, new = op_pairs(current, baseline)
    out = []
    if ops.ops_now and ops.ops_then and not (ops.ids_now and ops.ids_then):
        out.append(
            Verdict(
                "op_instructions",
                Status.NOTE,
                label,
                LEGACY_PAIRING,
                Evidence({"pairing": "execution order"}, Kind.CONTEXT),
            )
        )
    grown = []
    for before, after in pairs:
        base, cur = float(ops.ops_then[before][1]), float(ops.ops_now[after][1])
        if ops.ops_then[before][2] > 0 and ops.ops_now[after][2] == 0:
            out.append(_lost_sme_path(ops, before, after))
        if base > 0 and cur / base - 1 > tol.op_instructions and cur - base > MIN_OP_INSTRUCTIONS:
            grown.append((cur - base, before, after, cur, base))
    out += [_grown(ops, before, after, cur, base) for _, before, after, cur, base in sorted(grown, reverse=True)]
    if gone or new:
        out.append(_operators_changed(ops, pairs, gone, new))
    if all(v.evidence.kind == Kind.CONTEXT for v in out):  # nothing found (the legacy-pairing note aside)
        out.append(
            Verdict(
                "op_instructions",
                Status.OK,
                label,
                f"every operator within +{tol.op_instructions:.1%} " f"instructions ({len(ops.ops_now)} operators)",
            )
        )
    return out


def _named_node(ops: _Counted, op: str) -> str:
    """The operator by what it is in the graph, where it has a node: its key's "#N @K" say nothing to a reader."""
    name = (ops.ids_then or {}).get(op)
    return name if name and " after " not in name else op


def _node(ops: _Counted, op: str) -> str:
    """ " (b1.conv: aten.convolution.default)": the graph node, in the user's code, this operator implements."""
    name = (ops.ids_then or {}).get(op)
    return f" ({name})" if name and " after " not in name else ""


def _lost_sme_path(ops: _Counted, before: str, after: str) -> Verdict:
    """A paired operator that ran SME instructions in the baseline and none now: its SME kernel path is lost."""
    renamed = f" (now {after})" if op_kind(after) != op_kind(before) else ""
    return Verdict(
        "sme_path",
        Status.REGRESSION,
        ops.label,
        f"operator {before}{_node(ops, before)}{renamed} ran {ops.ops_then[before][2]:,} SME "
        f"instructions in the baseline and none now: its SME kernel path is lost",
        Evidence({"op": before, "now": after, "baseline_sme": ops.ops_then[before][2]}, Kind.KERNEL_PATH),
    )


def _grown(ops: _Counted, before: str, after: str, cur: float, base: float) -> Verdict:
    """A paired operator whose instructions grew beyond the tolerance and MIN_OP_INSTRUCTIONS: a regression."""
    tol = ops.tol
    renamed = f" (now {after})" if after != before else ""
    return Verdict(
        "op_instructions",
        Status.REGRESSION,
        ops.label,
        f"operator {before}{_node(ops, before)}{renamed}: {cur:,.0f} instructions vs baseline "
        f"{base:,.0f} ({cur / base - 1:+.2%}; tolerance +{tol.op_instructions:.1%} and "
        f"{MIN_OP_INSTRUCTIONS} instructions)",
        Evidence(
            {
                "op": before,
                "now": after,
                "current": cur,
                "baseline": base,
                "tolerance": tol.op_instructions,
                "node": (ops.ids_then or {}).get(before),
            },
            short=f"operator {_named_node(ops, before)} {cur / base - 1:+.1%} instructions",
        ),
    )


def _named(names: list[str], ids: Mapping[str, str] | None) -> str:
    """Operators by the graph node they implement, where they have one (identity.py), and their kind: their
    keys' positions ("#5 @16") shift with anything inserted before them and say nothing to a reader."""
    shown = [
        n if not ids or n not in ids else ids[n] if " after " in ids[n] else f"{ids[n]} ({op_kind(n)})"
        for n in names[:6]
    ]
    return ", ".join(shown) + (" ..." if len(names) > 6 else "")


def _operators_changed(ops: _Counted, pairs: Sequence[tuple[str, str]], gone: list[str], new: list[str]) -> Verdict:
    """Operators that appeared or went: a note, or a regression when an SME operator went while its block stayed
    (an SME operator of a block removed whole went with its block: no kernel path was lost)."""
    ids_now, ids_then = ops.ids_now, ops.ids_then

    def block(op: str) -> tuple[str, str] | None:
        return structure.instance_of((ids_then or {}).get(op, op))

    kept = {block(before) for before, _ in pairs}
    lost_sme = [n for n in gone if ops.ops_then[n][2] > 0 and (block(n) is None or block(n) in kept)]
    text = "; ".join(
        part
        for part in (f"gone: {_named(gone, ids_then)}" if gone else "", f"new: {_named(new, ids_now)}" if new else "")
        if part
    )
    why = f"operators that ran SME instructions are gone: {', '.join(lost_sme)}; " if lost_sme else ""
    return Verdict(
        "op_instructions",
        Status.REGRESSION if lost_sme else Status.NOTE,
        ops.label,
        f"{why}the program's operators changed ({text})",
        Evidence(
            {
                "gone": gone,
                "new": new,
                "lost_sme": lost_sme,
                "gone_identity": [(ids_then or {}).get(n) for n in gone],
                "new_identity": [(ids_now or {}).get(n) for n in new],
            },
            Kind.OPERATORS,
        ),
    )


def _sme_kernels(label: str, now: Counts, then: Counts) -> list[Verdict]:
    lost = sorted(set(then.sme_kernels or ()) - set(now.sme_kernels or ()))
    if lost:
        return [
            Verdict(
                "sme_path",
                Status.REGRESSION,
                label,
                f"SME/SME2 kernel(s) executed in the baseline but not now: {', '.join(lost)}",
                Evidence({"lost": lost}, Kind.KERNEL_PATH),
            )
        ]
    return []


def _counted(pair: Pair) -> list[Verdict]:
    counts = counts_of(pair)
    if counts is None:
        return []
    return [*_op_instructions(pair.label, pair.current, pair.baseline, pair.tol), *_sme_kernels(pair.label, *counts)]


CHECK = Check(
    ("op_instructions", "sme_path"), "docs/gate.md#on-the-emulated-target-the-gate-is-deterministic", counted=_counted
)

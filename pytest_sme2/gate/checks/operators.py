"""Counted operators (emulated target): each operator's instructions against the baseline's, operators paired by
the graph node they implement (pairing.py); which grew, which lost their SME kernels, which appeared or went; and
the SME/SME2 kernels the whole program no longer executes. docs/gate.md, "On the emulated target the gate is
deterministic".
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.gate import structure
from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.checks.counted import MIN_OP_INSTRUCTIONS, counted_of, counts_of
from pytest_sme2.gate.checks.pairing import LEGACY_PAIRING, op_kind, op_pairs
from pytest_sme2.gate.verdict import Evidence, Kind, Status, Tolerances, Verdict


def _op_instructions(
    label: str, current: Mapping[str, Any], baseline: Mapping[str, Any], tol: Tolerances
) -> list[Verdict]:
    """Each operator's instructions against the baseline's, operators paired by identity (align_ops): which
    got more expensive, which lost their SME kernels, and which appeared or disappeared."""
    now, then = counted_of(current) or {}, counted_of(baseline) or {}
    ops_now, ops_then = now.get("ops") or {}, then.get("ops") or {}
    ids_now, ids_then = now.get("op_identity"), then.get("op_identity")
    pairs, gone, new = op_pairs(current, baseline)
    out = []
    if ops_now and ops_then and not (ids_now and ids_then):
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

    def named_node(op: str) -> str:
        """The operator by what it is in the graph, where it has a node: its key's "#N @K" say nothing to a reader."""
        name = (ids_then or {}).get(op)
        return name if name and " after " not in name else op

    def node(op: str) -> str:
        """ " (b1.conv: aten.convolution.default)": the graph node, in the user's code, this operator implements."""
        name = (ids_then or {}).get(op)
        return f" ({name})" if name and " after " not in name else ""

    for before, after in pairs:
        base, cur = float(ops_then[before][1]), float(ops_now[after][1])
        if ops_then[before][2] > 0 and ops_now[after][2] == 0:
            renamed = f" (now {after})" if op_kind(after) != op_kind(before) else ""
            out.append(
                Verdict(
                    "sme_path",
                    Status.REGRESSION,
                    label,
                    f"operator {before}{node(before)}{renamed} ran {ops_then[before][2]:,} SME "
                    f"instructions in the baseline and none now: its SME kernel path is lost",
                    Evidence({"op": before, "now": after, "baseline_sme": ops_then[before][2]}, Kind.KERNEL_PATH),
                )
            )
        if base > 0 and cur / base - 1 > tol.op_instructions and cur - base > MIN_OP_INSTRUCTIONS:
            grown.append((cur - base, before, after, cur, base))
    for _, before, after, cur, base in sorted(grown, reverse=True):
        renamed = f" (now {after})" if after != before else ""
        out.append(
            Verdict(
                "op_instructions",
                Status.REGRESSION,
                label,
                f"operator {before}{node(before)}{renamed}: {cur:,.0f} instructions vs baseline "
                f"{base:,.0f} ({cur / base - 1:+.2%}; tolerance +{tol.op_instructions:.1%} and "
                f"{MIN_OP_INSTRUCTIONS} instructions)",
                Evidence(
                    {
                        "op": before,
                        "now": after,
                        "current": cur,
                        "baseline": base,
                        "tolerance": tol.op_instructions,
                        "node": (ids_then or {}).get(before),
                    },
                    short=f"operator {named_node(before)} {cur / base - 1:+.1%} instructions",
                ),
            )
        )
    if gone or new:
        # an SME operator of a block removed whole went with its block: no kernel path was lost
        def block(op: str) -> tuple[str, str] | None:
            return structure.instance_of((ids_then or {}).get(op, op))

        kept = {block(before) for before, _ in pairs}
        lost_sme = [n for n in gone if ops_then[n][2] > 0 and (block(n) is None or block(n) in kept)]

        def named(names: list[str], ids: Mapping[str, str] | None) -> str:
            """Operators by the graph node they implement, where they have one (identity.py), and their kind: their
            keys' positions ("#5 @16") shift with anything inserted before them and say nothing to a reader."""
            shown = [
                n if not ids or n not in ids else ids[n] if " after " in ids[n] else f"{ids[n]} ({op_kind(n)})"
                for n in names[:6]
            ]
            return ", ".join(shown) + (" ..." if len(names) > 6 else "")

        text = "; ".join(
            part
            for part in (f"gone: {named(gone, ids_then)}" if gone else "", f"new: {named(new, ids_now)}" if new else "")
            if part
        )
        why = f"operators that ran SME instructions are gone: {', '.join(lost_sme)}; " if lost_sme else ""
        out.append(
            Verdict(
                "op_instructions",
                Status.REGRESSION if lost_sme else Status.NOTE,
                label,
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
        )
    if all(v.evidence.kind == Kind.CONTEXT for v in out):  # nothing found (the legacy-pairing note aside)
        out.append(
            Verdict(
                "op_instructions",
                Status.OK,
                label,
                f"every operator within +{tol.op_instructions:.1%} " f"instructions ({len(ops_now)} operators)",
            )
        )
    return out


def _sme_kernels(label: str, now: Mapping[str, Any], then: Mapping[str, Any]) -> list[Verdict]:
    lost = sorted(set(then.get("sme_kernels") or ()) - set(now.get("sme_kernels") or ()))
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

"""Provenance: another executorch or torch, another traced program, other example inputs or another recipe
since the baseline was recorded. A note, never a failure: it explains a change rather than causes one.
docs/gate.md, "Provenance".
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Verdict

# What a record's provenance holds that, changed, explains a change of its counts: the versions, the traced
# program, the example inputs, the recipe (in the order a note names them).
SETTINGS = ("executorch", "torch", "model_source_hash", "inputs", "recipe")


def moved_settings(current: GateRecord, baseline: GateRecord) -> dict[str, tuple[Any, Any]]:
    """Each of SETTINGS that both records know and that differs, as (then, now): the one comparison behind this
    check's note and the headline's cause (checks/change.py). A record from before a setting was kept says
    nothing of it."""
    now, then = current.provenance or {}, baseline.provenance or {}
    return {key: (then[key], now[key]) for key in SETTINGS if then.get(key) and now.get(key) and then[key] != now[key]}


def unchanged_count(current: GateRecord, baseline: GateRecord) -> float | None:
    """The instructions per inference when both records counted the same number, else None: what says that a
    change of versions left the program's count as it was (this note, and checks/change.py's upgrade)."""
    counts = [None if r.instructions is None else r.instructions.per_inference for r in (current, baseline)]
    return counts[0] if counts[0] is not None and counts[0] == counts[1] else None


def _provenance(label: str, current: GateRecord, baseline: GateRecord) -> list[Verdict]:
    """Version and model changes: flagged (not failed), since they explain a change rather than cause a failure."""
    now, then = current.provenance or {}, baseline.provenance or {}
    moved = moved_settings(current, baseline)
    notes = [f"{key} {moved[key][0]} then, {moved[key][1]} now" for key in ("executorch", "torch") if key in moved]
    same = unchanged_count(current, baseline)
    if notes and same is not None:
        notes[-1] += f" (the upgrade left its count unchanged: {same:,} instructions per inference)"
    if "model_source_hash" in moved:
        notes.append(
            "the model's traced program changed" + _changed_files(then.get("model_files"), now.get("model_files"))
        )
    if "inputs" in moved:
        notes.append(f"example inputs {', '.join(then['inputs'])} then, {', '.join(now['inputs'])} now")
    if "recipe" in moved:

        def text(recipe: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(recipe.items()))

        notes.append(f"recipe {text(then['recipe'])} then, {text(now['recipe'])} now")
    return (
        [
            Verdict(
                "provenance",
                Status.NOTE,
                label,
                "since the baseline was recorded: " + "; ".join(notes),
                Evidence({"current": now, "baseline": then}),
            )
        ]
        if notes
        else []
    )


def _changed_files(then: Mapping[str, str] | None, now: Mapping[str, str] | None, shown: int = 5) -> str:
    """`` (files changed: a.py, b.py (new))`` between two registry.source_files; "" when either is unknown (a
    baseline from before they were kept)."""
    if not then or not now:
        return ""
    changed = [
        f"{name} (new)" if name not in then else f"{name} (gone)" if name not in now else name
        for name in sorted(set(then) | set(now))
        if then.get(name) != now.get(name)
    ]
    if not changed:
        return " (none of its own files changed: code it imports from elsewhere, its weights or its input values did)"
    more = f" and {len(changed) - shown} more" if len(changed) > shown else ""
    return f" (files changed: {', '.join(changed[:shown])}{more})"


def _notes(pair: Pair) -> list[Verdict]:
    return _provenance(pair.label, pair.current, pair.baseline)


CHECK = Check(("provenance",), "docs/gate.md#provenance", counted=_notes, measured=_notes)

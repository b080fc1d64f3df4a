"""What changed in a profile's variant when its label has no record but a near one does.

A profile's label is its model and recipe, then its variant in brackets: ``tiny_llama fp32-xnnpack [emulated
sme2=on threads=1 prefill P=16]``. Running a test with another sequence length, thread count or SME2 setting
makes a label no baseline holds; "no baseline" alone then reads as if the test were new. When exactly one stored
record of the same model differs only in the values of the same settings, the gate says which values changed,
so the reader knows it was the test's settings, not the model, and that recording again is the way on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LABEL = re.compile(r"^(?P<head>.*) \[(?P<variant>[^\]]*)\]$")


def _split(label: str) -> tuple[str, list[str]] | None:
    found = _LABEL.match(label)
    return (found["head"], found["variant"].split()) if found else None


def _differences(now: list[str], then: list[str]) -> list[tuple[str, str, str]] | None:
    """(setting, stored value, current value) of each differing ``k=v`` word; None if the variants differ in
    anything else (other words, other settings, another number of words)."""
    if len(now) != len(then):
        return None
    found = []
    for new, old in zip(now, then):
        if new == old:
            continue
        new_key, has_new, new_value = new.partition("=")
        old_key, has_old, old_value = old.partition("=")
        if not (has_new and has_old) or new_key != old_key:
            return None
        found.append((new_key, old_value, new_value))
    return found


def variant_change(label: str, stored: Iterable[str]) -> str | None:
    """``"P=16 -> P=12"`` when exactly one label in ``stored`` is ``label`` with other values of the same
    settings (the fewest changed), else None."""
    split = _split(label)
    if split is None:
        return None
    head, words = split
    candidates: list[tuple[int, list[tuple[str, str, str]]]] = []
    for other in stored:
        other_split = _split(other)
        if other_split is None or other_split[0] != head:
            continue
        changes = _differences(words, other_split[1])
        if changes:
            candidates.append((len(changes), changes))
    if not candidates:
        return None
    fewest = min(count for count, _ in candidates)
    best = [changes for count, changes in candidates if count == fewest]
    if len(best) != 1:
        return None
    return ", ".join(f"{key}={old} -> {key}={new}" for key, old, new in best[0])


def missing_records_text(absent: list[str], stored: Iterable[str]) -> str:
    """The labels without a record, each followed by the change of settings that explains it where one does:
    ``... prefill P=12] (this test's settings changed since the baseline: P=16 -> P=12)``."""
    stored = list(stored)
    shown = []
    for label in absent:
        change = variant_change(label, stored)
        shown.append(
            label
            if change is None
            else f"{label} (this test's settings changed since the baseline was recorded: {change}; the "
            f"baseline holds the old settings, not another model)"
        )
    return ", ".join(shown)

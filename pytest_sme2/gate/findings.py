"""From verdicts to findings: one change, one headline.

One change to a model moves many quantities at once. A ``torch.cumsum`` that falls out of the delegate
splits it in two, adds layout transposes at the new boundary, and so moves the instructions per
inference, the planned memory, the delegation coverage and every category share: twelve failing
verdicts per variant, the cause eleventh among them. A person fixing it needs the cause first and the
rest as its consequences, named once. So verdicts are grouped by cause, in this order:

1. a baseline that is missing (nothing else can be judged without it);
2. structure: nodes that fell out of the delegate, then the change the person made as the paired graph
   nodes show it ("layers: 2 -> 3 blocks (layers.1 added)", "layers.*.act: relu -> gelu", a dtype, GEMMs
   that grew in every block), then operators added or removed, an SME kernel path lost. These explain the
   numbers; the numbers do not explain them. A headline naming the person's change also names the
   quantity it moved most, so its first line says what was done and what it cost;
3. the quantities they move (instructions, latency, memory, shares, coverage, one operator's cost),
   one short item each, per variant;
4. context: notes that explain a change without failing (another setup, how operators were paired).

The failing test's message is built from this (:func:`message_lines`): the root cause in one line,
the other findings in a few more, and the path of the file with every verdict. Verdicts themselves
(gate/checks) are unchanged; this module only orders and words them, reading their typed fields (status,
check, ``Evidence.kind`` and numbers), never their text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pytest_sme2.gate.verdict import Kind, Status, Verdict

MISSING_CAUSE, DELEGATE, CHANGE, OPERATORS, SME_PATH, QUANTITY, CONTEXT = range(7)
_CAUSE_NAMES = {
    MISSING_CAUSE: "missing",
    DELEGATE: "delegate",
    CHANGE: "change",
    OPERATORS: "operators",
    SME_PATH: "SME path",
    QUANTITY: "quantity",
    CONTEXT: "context",
}
MOVED_ITEMS = 6  # quantities named per variant in the message; the rest are in the verdicts file


@dataclass(frozen=True)
class Finding:
    """One cause (or quantity) and the variants it holds for, with the verdicts behind it."""

    cause: int  # MISSING_CAUSE .. CONTEXT: lower comes first
    text: str  # without the variant's label
    labels: tuple[str, ...]
    verdicts: tuple[Verdict, ...]
    first: str = ""  # a quantity finding's first item: what a change's headline says it moved

    @property
    def cause_name(self) -> str:
        return _CAUSE_NAMES[self.cause]

    def line(self) -> str:
        """The finding in one line, naming its variants once."""
        return f"{_labels(self.labels)}: {self.text}"


def cause_of(verdict: Verdict) -> int | None:
    """Which cause a verdict belongs to; None for one that neither fails nor explains a failure."""
    kind = verdict.evidence.kind
    if verdict.status == Status.MISSING:
        return MISSING_CAUSE
    if verdict.status == Status.NOTE:
        if verdict.check == "change":
            return CHANGE
        if kind == Kind.OPERATORS:
            return OPERATORS  # the program's operators changed: structure, even where it alone fails nothing
        return CONTEXT
    if verdict.status != Status.REGRESSION:
        return None
    if verdict.check == "delegated_ops":
        return DELEGATE
    if kind == Kind.OPERATORS:
        return OPERATORS
    if kind == Kind.KERNEL_PATH:
        return SME_PATH
    return QUANTITY


def findings(verdicts: Sequence[Verdict]) -> list[Finding]:
    """The verdicts that fail or explain a failure, grouped by cause, root cause first.

    Structural and context findings with the same words in several variants are one finding naming the
    variants; quantities are one finding per variant (their numbers differ), short items joined.
    """
    grouped: dict[tuple[int, str], list[Verdict]] = {}
    for verdict in verdicts:
        cause = cause_of(verdict)
        if cause is None:
            continue
        key = (cause, verdict.label if cause == QUANTITY else verdict.message)
        grouped.setdefault(key, []).append(verdict)
    out = []
    for (cause, words), members in grouped.items():
        labels = tuple(dict.fromkeys(v.label for v in members))
        if cause == QUANTITY:
            items = [_short(v) for v in members]
            more = len(items) - MOVED_ITEMS
            text = "; ".join(items[:MOVED_ITEMS]) + (f"; and {more} more" if more > 0 else "")
        else:
            text = words
        out.append(Finding(cause, text, labels, tuple(members), items[0] if cause == QUANTITY else ""))
    return sorted(out, key=lambda f: f.cause)  # stable: verdict order within a cause


def failed(found: Sequence[Finding]) -> bool:
    return any(v.failed for f in found for v in f.verdicts)


def headline(found: Sequence[Finding]) -> str:
    """The root cause in one line: the first finding that fails or is structure (never a mere note). A person's
    change (CHANGE) is followed by the first quantity it moved in those variants ("...: instructions per
    inference +21.5%")."""
    lead = _lead(found)
    if lead is None:
        return ""
    moved = lead.verdicts[0].evidence.get("moved") or next(
        (f.first for f in found if f.cause == QUANTITY and f.labels[0] in lead.labels), ""
    )
    return lead.line() + (f": {moved}" if lead.cause == CHANGE and moved else "")


def _lead(found: Sequence[Finding]) -> Finding | None:
    """The finding the headline names: the first that fails or is structure, else the first."""
    return next((f for f in found if f.cause < QUANTITY), found[0] if found else None)


def message_lines(found: Sequence[Finding], limit: int = 4) -> list[str]:
    """The failing test's lines for these findings: the headline, then up to ``limit`` more findings
    (structure, then what moved, then context), the rest counted. The full list goes to a file."""
    if not found:
        return []
    first = headline(found)
    lead = _lead(found)
    assert lead is not None  # found is not empty
    rest = [f for f in found if f is not lead]
    lines = [first]
    for finding in rest[:limit]:
        prefix = {QUANTITY: "moved by it: " if lead.cause < QUANTITY else "moved: ", CONTEXT: "note: "}.get(
            finding.cause, "also: "
        )
        # the headline named the variants: a finding of the same ones says only what it is
        lines.append(f"  {prefix}{finding.text if finding.labels == lead.labels else finding.line()}")
    if len(rest) > limit:
        lines.append(f"  ... and {len(rest) - limit} more finding(s)")
    return lines


def _labels(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{labels[0]} (and {len(labels) - 1} more variant(s))"


def _short(verdict: Verdict) -> str:
    """A failing quantity in a few words: as its check worded it (``Evidence.short``; the verdict has the numbers,
    tolerance and test), else its message, cut to a line."""
    if verdict.evidence.short:
        return verdict.evidence.short
    return verdict.message if len(verdict.message) <= 90 else verdict.message[:87] + "..."

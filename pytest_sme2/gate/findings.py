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
(verdicts.py) are unchanged; this module only orders and words them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pytest_sme2.gate.verdicts import MISSING, NOTE, REGRESSION, Verdict
from pytest_sme2.profile.device_model import time_text

MISSING_CAUSE, DELEGATE, CHANGE, OPERATORS, SME_PATH, QUANTITY, CONTEXT = range(7)
_CAUSE_NAMES = {MISSING_CAUSE: "missing", DELEGATE: "delegate", CHANGE: "change", OPERATORS: "operators",
                SME_PATH: "SME path", QUANTITY: "quantity", CONTEXT: "context"}
MOVED_ITEMS = 6  # quantities named per variant in the message; the rest are in the verdicts file
_START_UP = {"load": "load (Program::load_method)", "init": "init (Method::init)",
             "peak_rss": "peak resident memory"}  # the start-up and memory checks, as the message names them


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
    if verdict.status == MISSING:
        return MISSING_CAUSE
    if verdict.status == NOTE:
        if verdict.check == "change":
            return CHANGE
        if verdict.check == "op_instructions" and ("gone" in verdict.evidence or "new" in verdict.evidence):
            return OPERATORS  # the program's operators changed: structure, even where it alone fails nothing
        return CONTEXT
    if verdict.status != REGRESSION:
        return None
    if verdict.check == "delegated_ops":
        return DELEGATE
    if verdict.check == "op_instructions" and ("gone" in verdict.evidence or "new" in verdict.evidence):
        return OPERATORS
    if verdict.check == "sme_path" and ("op" in verdict.evidence or "lost" in verdict.evidence):
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
    for (cause, key), members in grouped.items():
        labels = tuple(dict.fromkeys(v.label for v in members))
        if cause == QUANTITY:
            items = [_short(v) for v in members]
            more = len(items) - MOVED_ITEMS
            text = "; ".join(items[:MOVED_ITEMS]) + (f"; and {more} more" if more > 0 else "")
        else:
            text = key
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
        (f.first for f in found if f.cause == QUANTITY and f.labels[0] in lead.labels), "")
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
    rest = [f for f in found if f is not lead]
    lines = [first]
    for finding in rest[:limit]:
        prefix = {QUANTITY: "moved by it: " if lead.cause < QUANTITY else "moved: ",
                  CONTEXT: "note: "}.get(finding.cause, "also: ")
        # the headline named the variants: a finding of the same ones says only what it is
        lines.append(f"  {prefix}{finding.text if finding.labels == lead.labels else finding.line()}")
    if len(rest) > limit:
        lines.append(f"  ... and {len(rest) - limit} more finding(s)")
    return lines


def _labels(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{labels[0]} (and {len(labels) - 1} more variant(s))"


def _points(verdict: Verdict) -> str | None:
    now, then = verdict.evidence.get("current"), verdict.evidence.get("baseline")
    if isinstance(now, (int, float)) and isinstance(then, (int, float)):
        return f"{then:.1%} -> {now:.1%}"
    return None


def _short(verdict: Verdict) -> str:
    """A failing quantity in a few words (its verdict has the numbers, tolerance and test)."""
    evidence, check = verdict.evidence, verdict.check
    if check in ("instructions", "memory") and isinstance(evidence.get("current"), (int, float)) \
            and isinstance(evidence.get("baseline"), (int, float)) and evidence["baseline"]:
        what = "instructions per inference" if check == "instructions" else "planned memory"
        return f"{what} {evidence['current'] / evidence['baseline'] - 1:+.1%}"
    if check == "latency" and isinstance(evidence.get("ratio"), (int, float)):
        basis = "relative" if evidence.get("basis") == "relative" else "raw"
        interval = (f" (95% CI {evidence['ratio_low'] - 1:+.1%} to {evidence['ratio_high'] - 1:+.1%}, tolerance "
                    f"{evidence['tolerance']:+.0%}, p={evidence['p_slower']:.2g})"
                    if all(isinstance(evidence.get(k), (int, float)) for k in
                           ("ratio_low", "ratio_high", "tolerance", "p_slower")) else "")
        return f"{basis} latency {evidence['ratio'] - 1:+.1%}{interval}"
    if check == "modelled" and isinstance(evidence.get("change"), (int, float)):
        grew = evidence.get("ops") or []
        most = (f", most {grew[0]['op']} {time_text(grew[0]['baseline_ms'])} -> {time_text(grew[0]['current_ms'])}"
                if grew else "")
        return f"modelled time on {evidence.get('device')} {evidence['change']:+.1%}{most}"
    if check in _START_UP and isinstance(evidence.get("current"), (int, float)) \
            and isinstance(evidence.get("baseline"), (int, float)) and evidence["baseline"]:
        ratio = evidence.get("ratio", evidence["current"] / evidence["baseline"])  # the judged ratio (relative)
        return f"{_START_UP[check]} {ratio - 1:+.1%}"
    if check == "op_instructions" and "op" in evidence:
        node = evidence.get("node")  # by what it is in the graph: its key's "#N @K" say nothing to a reader
        what = node if node and " after " not in node else evidence["op"]
        return f"operator {what} {evidence['current'] / evidence['baseline'] - 1:+.1%} instructions"
    points = _points(verdict)
    if points is not None:
        what = {"share": f"share of {evidence.get('category')}", "sme_path": "SME path share",
                "delegation_coverage": "delegated graph nodes" if evidence.get("basis") == "nodes"
                else f"delegated share of the run's {'instructions' if 'instructions' in verdict.message else 'time'}"
                }.get(check, check)
        return f"{what} {points}"
    return verdict.message if len(verdict.message) <= 90 else verdict.message[:87] + "..."

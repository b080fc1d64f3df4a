"""Number formatting and the one summary table (a row per profile) shared by every output.

The terminal, summary.md and the HTML pages show the same table, so its
columns and wording are decided here once: model, variant, median E2E,
SME2 speedup with its interval, the shift of the top category, delegation and
the baseline verdict. Delegation is a program's share of graph nodes where the export says it (a
property of the program: the same with SME2 on and off); a share of a run's time or counted instructions
moves with the kernels that run, so where it is shown it says which it is. On the emulated target, whose time is the
emulator's, the row shows counted instructions instead and how many times
fewer SME2 on needed; shares there are shares of instructions.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence

from pytest_sme2.profile.device_model import time_text
from pytest_sme2.report.entries import verdict_text
from pytest_sme2.report.escape import Markdown, text

COLUMNS = (
    "test",
    "model",
    "variant",
    "median ms (emulated: instructions)",
    "SME2 speedup [95% CI]",
    "top category shift",
    "delegated",
    "verdict",
)
AMOUNT = COLUMNS.index("median ms (emulated: instructions)")
SPEEDUP = AMOUNT + 1
NOT_COUNTED = "n/a (emulated, not counted)"


def columns(test_entries: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """COLUMNS with the size column named for what its rows hold: "median ms" with no emulated row, counted
    instructions when every row is emulated (emulated time is not time: no "ms" over a column of counts), and
    the legend of both for a session with both."""
    emulated = [bool(p.get("emulated")) for t in test_entries for p in t["profiles"]]
    header = COLUMNS[AMOUNT]
    if not any(emulated):
        header = "median ms"
    elif all(emulated):
        header = "instructions per inference (emulated)"
    # a modelled speedup has no interval: the header says what the column holds
    speedup_header = COLUMNS[SPEEDUP]
    if all(emulated) and emulated:
        modelled = any(
            (c.get("modelled") or {}).get("speedup") is not None
            for t in test_entries
            for c in t.get("comparisons") or []
        )
        speedup_header = "SME2 speedup (modelled; counted)" if modelled else speedup_header
    return COLUMNS[:AMOUNT] + (header, speedup_header) + COLUMNS[SPEEDUP + 1 :]


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def speedup(value: Mapping[str, float] | None, emulated: bool = False) -> str:
    if value is None:
        return "n/a (emulated)" if emulated else "n/a"
    # one runner process a side: the interval holds run-to-run noise only (Speedup.within_one_process)
    sides = [value.get(f"{side}_chunks", value.get(f"{side}_processes", 2)) for side in ("this", "other")]  # schema 2
    one_process = min(sides) < 2
    return f"{value['value']:.2f}x [{value['low']:.2f}, {value['high']:.2f}]" + (
        " (1-process CI)" if one_process else ""
    )


def instructions(value: float | None) -> str:
    """Counted instructions, short: 12.65 M, 361.8 k, 950."""
    if value is None:
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    return f"{value / 1e3:.1f} k" if value >= 1e3 else f"{value:.0f}"


SME_INSTRUCTIONS_LABEL = "SME instructions (share of CONV+GEMM instructions that are SME encodings)"


def sme_path_label(basis: str | None, emulated: bool = False) -> str:
    """The SME path metric's one name everywhere (HTML, markdown, terminal), with what it measures: the
    share of CONV+GEMM work, time or instructions in operators on SME kernels. Distinct from
    ``SME_INSTRUCTIONS_LABEL``, the share of CONV+GEMM instructions that are themselves SME encodings
    (an SME kernel also runs plain loads, stores and loop code, so the two differ widely)."""
    time = "emulator time (not time)" if emulated else "time"  # an emulated run without instruction counts
    measure = {"work": "multiply-accumulates", "instructions": "instructions", "time": time}.get(
        basis or "time", str(basis)
    )
    return f"SME path (share of CONV+GEMM {measure} in operators on SME kernels)"


def fewer(value: float | None, unit: str = "instr") -> str:
    """How many times fewer instructions SME2 on needs (off / on); below 1 it needs more, and says so."""
    if value is None:
        return "n/a"
    if round(value, 2) == 1.0:  # "1.00x fewer" read as fewer; the two sides counted (about) the same
        return f"same {unit}" if value == 1.0 else f"about the same {unit} ({value:.4f}x)"
    return f"{value:.2f}x fewer {unit}" if value > 1 else f"{1 / value:.2f}x more {unit}"


def amount(profile: Mapping[str, Any]) -> str:
    """The size of one inference: median ms, or counted instructions on the emulated target (an emulated run
    without counts has none: its time is the emulator's)."""
    counted = profile.get("instructions") if profile.get("basis") == "instructions" else None
    if counted:
        return (
            f"{instructions(counted['per_inference'])} instr"
            + per_token(profile, counted["per_inference"])
            + (" (cached)" if from_result_cache(profile) else "")
        )
    if profile.get("emulated"):  # emulator time is no latency: without counts there is no size to show
        return NOT_COUNTED
    return ms(profile["latency"]["median_ms"]) + per_token(profile, profile["latency"]["median_ms"])


def per_token(profile: Mapping[str, Any], per_run: float | None) -> str:
    """A language model phase's figure per token (measure/llm.py): ", 12.3 k instr/token" counted, ", 8,081
    tokens/s" measured; "" for a profile that is no LLM phase."""
    tokens = ((profile.get("metadata") or {}).get("llm") or {}).get("tokens_per_run")
    if not tokens or per_run is None or per_run <= 0:
        return ""
    if profile.get("basis") == "instructions":
        if tokens == 1:  # a decode step: per inference is per token already
            return ""
        return f", {instructions(per_run / tokens)} instr/token"
    return f", {tokens / (per_run / 1e3):,.0f} tokens/s"


def from_result_cache(profile: Mapping[str, Any]) -> bool:
    """Whether this counted emulated run was answered from the result cache (run/result_cache.py)."""
    return bool(((profile.get("metadata") or {}).get("result_cache") or {}).get("cached"))


def result_cache_line(test_entries: Sequence[Mapping[str, Any]]) -> str | None:
    """How many of the session's counted runs the result cache answered, for the line under the summary table
    (under pytest-xdist the workers' progress lines, which say it run by run, are not shown)."""
    counted = [p for t in test_entries for p in t["profiles"] if p.get("basis") == "instructions"]
    cached = sum(from_result_cache(p) for p in counted)
    if not cached:
        return None
    return (
        f"sme2: {cached} of {len(counted)} counted runs answered from the result cache (every input unchanged; "
        "marked (cached); --sme2-fresh emulates them again)"
    )


def thread_scaling_rows(test_entry: Mapping[str, Any]) -> list[list[str]]:
    """Rows (program, threads, speedup [95% CI], median ms off, median ms on) of a test's measured SME2 on/off
    comparisons when it has them at more than one thread count (the sme2_thread_scaling fixture); else none."""
    timed = [c for c in test_entry.get("comparisons", []) if c.get("speedup") and c.get("threads") is not None]
    if len({c["threads"] for c in timed}) < 2:
        return []
    timed.sort(key=lambda c: (c["model"], c["recipe"], int(c["threads"])))
    return [
        [
            f"{c['model']} {c['recipe']}",
            str(c["threads"]),
            speedup(c["speedup"], False),
            ms(c.get("off_median_ms")),
            ms(c.get("on_median_ms")),
        ]
        for c in timed
    ]


THREAD_SCALING_HEADERS = ["program", "threads", "SME2 speedup [95% CI]", "median ms off", "median ms on"]


def program_title(comparison: Mapping[str, Any]) -> str:
    """What an SME2 on/off comparison compares: "model recipe", with a language model's phase ("..., decode")."""
    phase = comparison.get("phase")
    return f"{comparison['model']} {comparison['recipe']}" + (f", {phase}" if phase else "")


def comparison_cell(comparison: Mapping[str, Any]) -> str:
    """The SME2 speedup with its interval, or on the emulated target how many times fewer instructions."""
    if comparison.get("unit") == "instructions":
        modelled = comparison.get("modelled") or {}
        if modelled.get("speedup") is not None:  # a device model priced the counts: say which, and that it is one
            # the validation's status only ("not validated"): its whole text is said once under the table
            # (modelled_labels), not on every row (330 columns)
            status = str(modelled["validation"]).split(":", 1)[0]
            return (
                f"{modelled['speedup']:.2f}x modelled on {modelled['device']} ({status}); "
                f"{fewer(comparison.get('fewer_instructions'))}"
            )
        if modelled.get("refused"):  # the terminal said only "n/a (emulated)"
            return (
                f"not modelled on {modelled['device']} (summary.md says why); "
                f"{fewer(comparison.get('fewer_instructions'))}"
            )
        return f"n/a (emulated); {fewer(comparison.get('fewer_instructions'))}"
    return speedup(comparison["speedup"], comparison["emulated"])


def modelled_labels(test_entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each device model's whole label, once, for the lines under a table whose cells give its status only."""
    seen: dict[str, str] = {}
    for entry in test_entries:
        for comparison in entry.get("comparisons") or []:
            modelled = comparison.get("modelled") or {}
            if modelled.get("speedup") is not None:
                seen.setdefault(str(modelled["device"]), str(modelled["validation"]))
    return [
        f"modelled on {device} ({validation}; a model, not a measurement: docs/device_model.md)"
        for device, validation in seen.items()
    ]


def modelled_text(modelled: Mapping[str, Any]) -> str:
    """One sentence on a comparison's modelled device time (entries.modelled_comparison): which device file,
    how far validated, that it is a model, and the operators modelled slower with SME2."""
    if modelled.get("refused"):
        return f"Not modelled on {modelled['device']}: {modelled['refused']}"
    slower = modelled["slower_with_sme2"]
    named = "; ".join(f"{op['identity']} {op['ratio']:.2f}x" for op in slower[:3]) + (
        "; ..." if len(slower) > 3 else ""
    )
    return (
        f"Modelled on {modelled['device']} ({modelled['validation']}; a model, not a measurement): "
        f"SME2 off {time_text(modelled['off_ms'])}, on {time_text(modelled['on_ms'])}: {modelled['speedup']:.2f}x. "
        + (
            f"{len(slower)} operator(s) modelled slower with SME2: {named}."
            if slower
            else "No operator is modelled slower with SME2."
        )
        + _modelled_tokens(modelled.get("tokens_per_s"))
    )


def _modelled_tokens(rates: "Mapping[str, float | None] | None") -> str:
    """ " Modelled tokens/s: SME2 off X, on Y." for a language model's phase; "" otherwise."""
    if not rates:
        return ""
    shown = {side: "n/a" if rate is None else f"{rate:,.1f}" for side, rate in rates.items()}
    return f" Modelled tokens/s: SME2 off {shown['off']}, on {shown['on']}."


def modelled_table(modelled: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the modelled ms per category, SME2 off and on (empty when the model refused)."""
    headers = ["category", "modelled off", "modelled on", "modelled speedup"]
    return headers, [
        [
            c["category"],
            time_text(c["off_ms"]),
            time_text(c["on_ms"]),
            "n/a" if c["speedup"] is None else f"{c['speedup']:.2f}x",
        ]
        for c in modelled.get("categories", [])
    ]


def category_change(category: Mapping[str, Any]) -> str:
    """What SME2 did to one category of a comparison: "5.00x faster", "16.70x fewer instr", "same instr"."""
    if category.get("fewer_instructions") is not None:
        return fewer(category["fewer_instructions"])
    value = (category.get("speedup") or {}).get("value")
    if value is None:
        return ""
    return f"{value:.2f}x faster" if value >= 1 else f"{1 / value:.2f}x slower"


def category_shift(comparison: Mapping[str, Any]) -> str:
    """The largest category off and what SME2 did to it: "CONV 97% -> 85%" while it stays the largest; when
    another takes its place, its fall and its cause first: "GEMM 46% -> 5% (16.70x fewer instr); CONV now 73%"
    (issue 65: ds_cnn read "GEMM 46% -> CONV 73%" though its CONV instructions did not change at all)."""
    shares = {c["category"]: c for c in comparison["categories"]}
    off, on = comparison["bottleneck_off"], comparison["bottleneck_on"]
    fell = f"{off} {shares[off]['off_share']:.0%} -> {shares[off]['on_share']:.0%}"
    if off == on:
        return fell
    why = category_change(shares[off])
    return f"{fell}{f' ({why})' if why else ''}; {on} now {shares[on]['on_share']:.0%}"


def top_category(profile: Mapping[str, Any]) -> str:
    shares = profile["shares"]
    top = max(shares, key=shares.get)
    return f"{top} {shares[top]:.0%}"


def coverage_text(profile: Mapping[str, Any], run_too: bool = False) -> str:
    """A profile's delegation, saying what it measures: "83.3% of nodes" (the program's graph nodes), else the
    run's share of instructions or time ("70.9% of instructions (run)"); ``run_too``: both, nodes first."""
    measure = "instructions" if profile.get("basis") == "instructions" else "time"
    run = f"{pct(profile.get('delegation_coverage'))} of {measure} (run)"
    nodes = profile.get("node_delegation_coverage")
    if nodes is None:
        return run
    return f"{pct(nodes)} of nodes" + (f", {run}" if run_too else "")


def short_test(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def summary_rows(test_entries: Sequence[Mapping[str, Any]], with_cause: bool = False) -> list[list[str]]:
    """One row per profile of every test entry; the SME2-on row of a pair carries the comparison. ``with_cause``:
    a regression's cell carries its headline (the reports' tables; the terminal prints the failure itself)."""
    rows = []
    for test_entry in test_entries:
        by_on = {c["on"]: c for c in test_entry.get("comparisons", [])}
        verdict = verdict_text(test_entry.get("verdicts", []), with_cause)
        for profile in test_entry["profiles"]:
            comparison = by_on.get(profile["variant"]) if profile.get("sme2") is True else None
            rows.append(
                [
                    short_test(test_entry["nodeid"]),
                    f"{profile['model']} {profile['recipe']}",
                    profile["variant"],
                    amount(profile),
                    comparison_cell(comparison) if comparison else "",
                    category_shift(comparison) if comparison else top_category(profile),
                    coverage_text(profile),
                    verdict,
                ]
            )
    return rows


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned plain-text table lines."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return out


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Table lines; a cell is plain text (escaped) unless it is markdown we built (escape.Markdown)."""

    def cell(value: Any) -> str:
        return value.replace("\n", " ") if isinstance(value, Markdown) else text(value)

    out = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def comparison_category_rows(
    comparison: Mapping[str, Any], sides: tuple[str, str], timed: bool = True
) -> tuple[list[str], list[list[str]]]:
    """The per-category rows of a comparison (entries.compare), for the text and HTML reports alike: the shares,
    then counted instructions where it is by instructions, else (``timed``: not emulator time) median ms and the
    speedup. ``sides`` names the two profiles in the headers ("off", "on" or "A", "B")."""
    a, b = sides
    counted = comparison.get("unit") == "instructions"
    headers = ["category", f"share {a}", f"share {b}"]
    if counted:
        headers += [f"instructions {a}", f"instructions {b}", f"fewer ({a}/{b})"]
    elif timed:
        headers += [f"median ms {a}", f"median ms {b}", "speedup [95% CI]"]
    return headers, [
        [c["category"], pct(c["off_share"]), pct(c["on_share"]), *_measured(c, counted, timed)]
        for c in comparison["categories"]
    ]


def comparison_operator_rows(
    comparison: Mapping[str, Any], sides: tuple[str, str], operator: str, category: bool, timed: bool = True
) -> tuple[list[str], list[list[str]]]:
    """The paired operators' rows of a comparison, as comparison_category_rows: ``operator`` formats each side's
    operator header (``"operator {}"``), ``category`` adds the operator's category (portable ones said so)."""
    a, b = sides
    counted = comparison.get("unit") == "instructions"
    headers = [operator.format(a), operator.format(b), *(["category"] if category else []), f"share {a}", f"share {b}"]
    if counted:
        headers += [f"instructions {a}", f"instructions {b}", f"fewer ({a}/{b})"]
    elif timed:
        headers += [f"median ms {a}", f"median ms {b}", "speedup [95% CI]"]
    rows = [
        [
            op["off_op"] or "-",
            op["on_op"] or "-",
            *([op["category"] + (" (portable)" if op["portable"] else "")] if category else []),
            pct(op["off_share"]),
            pct(op["on_share"]),
            *_measured(op, counted, timed),
        ]
        for op in comparison["operators"]
    ]
    return headers, rows


def portable_table(
    portable: Sequence[Mapping[str, Any]], worth: Collection[str], names: tuple[str, str], counted: bool, emulated: bool
) -> tuple[list[str], list[list[Any]]]:
    """The portable operators' headers and rows, for the HTML page and ``analyze`` alike (``names``: their operator and
    worth-delegating headers): counted instructions, or time, or on an uncounted emulated run only which ones ran."""
    if not counted and emulated:  # no counts, and emulator time is not time
        return [names[0], "count", "category"], [[op["op"], op["count"], op["category"]] for op in portable]
    if counted:
        measured = ["instructions per inference", "share of instructions"]
        cells = [[instructions(op["instructions"]), pct(op["instruction_share"])] for op in portable]
    else:
        measured = ["ms per run", "share of E2E"]
        cells = [[ms(op["median_ms_per_run"]), pct(op["share"])] for op in portable]
    rows = [
        [op["op"], op["count"], op["category"], *amounts, "YES" if op["op"] in worth else ""]
        for op, amounts in zip(portable, cells)
    ]
    return [names[0], "count", "category", *measured, names[1]], rows


def _measured(row: Mapping[str, Any], counted: bool, timed: bool) -> list[str]:
    """A comparison row's amounts beside its shares: instructions and how many fewer, or ms and the speedup."""
    if counted:
        return [
            instructions(row["off_instructions"]),
            instructions(row["on_instructions"]),
            fewer(row.get("fewer_instructions")),
        ]
    if timed:
        return [ms(row["off_median_ms"]), ms(row["on_median_ms"]), speedup(row["speedup"])]
    return []

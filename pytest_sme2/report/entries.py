"""A test's entry in the reports (one of summary.json's `tests`): its Profiles as JSON, SME2 on/off compared.

A profile's entry is its one JSON form, ``Profile.to_dict()`` (what baselines pick from too). Everything downstream
(terminal table, pytest-html section, summary.json, summary.md, the session
HTML page, ``pytest-sme2 report``) reads these plain dicts, so a test entry can
cross an xdist boundary or be read back from disk and rendered again.

Comparisons pair an SME2-on profile with an SME2-off profile of the same model,
recipe and thread count; their operators are paired by profile/op_pairs.py, which
also names the operators measured significantly slower with SME2 on (``slower_with_sme2``).
Every ratio comes from :mod:`pytest_sme2.profile.stats` (E2E speedup from
``Profile.speedup_over``), never from a second formula. Emulated timing is not
hardware timing, so emulated comparisons carry no speedups: their shares and
amounts are counted instructions (``unit``), with how many times fewer
instructions SME2 on needed.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from pytest_sme2.errors import OneProcessIntervalWarning, RunnerError
from pytest_sme2.evidence.categories import Category, classify
from pytest_sme2.gate.verdict import Status, Verdict
from pytest_sme2.profile import stats
from pytest_sme2.profile.breakdown import INSTRUCTIONS, TIME
from pytest_sme2.profile.op_pairs import match_ops, per_run_by_op, sme2_slowdowns
from pytest_sme2.profile.profile import Profile

if TYPE_CHECKING:
    from pytest_sme2.profile.device_model import DeviceModel

TOP_OPS = 12  # operators listed per comparison
EMULATED_NOTE = "emulated timing is not hardware timing"


def _ratio(
    slow: np.ndarray, fast: np.ndarray, slow_groups: np.ndarray, fast_groups: np.ndarray
) -> dict[str, float] | None:
    """median(slow) / median(fast) with its bootstrap interval (by runner process where there are several);
    None when either side has no time."""
    if np.median(fast) <= 0 or np.median(slow) <= 0:
        return None
    return stats.ratio_of_medians_ci(slow, fast, numerator_groups=slow_groups, denominator_groups=fast_groups).as_dict()


def sme2_setting(profile: Profile) -> bool | None:
    """The SME2 setting a profile was run with (None: the target's default or unknown)."""
    return profile.metadata.get("run", {}).get("sme2")


def _threads(profile: Profile) -> Any:
    return profile.metadata.get("run", {}).get("threads")


def pair_variants(profiles: Iterable[Profile]) -> list[tuple[Profile, Profile]]:
    """(on, off) pairs: same model, recipe and threads; each profile is used at most once."""
    profiles = list(profiles)
    offs = [p for p in profiles if sme2_setting(p) is False]
    pairs = []
    for on in (p for p in profiles if sme2_setting(p) is True):
        for off in offs:
            if (off.model, off.recipe, _threads(off)) == (on.model, on.recipe, _threads(on)):
                pairs.append((on, off))
                offs.remove(off)
                break
    return pairs


def _fewer(off: float, on: float) -> float | None:
    """How many times fewer instructions SME2 on needed than off (exact counts: no interval)."""
    return off / on if on > 0 and off > 0 else None


def compare(on: Profile, off: Profile, top: int = TOP_OPS, device: "str | DeviceModel | None" = None) -> dict[str, Any]:
    """How SME2 on differs from off: E2E speedup, category shift, per-operator speedups; for counted runs and a
    ``device``, also the modelled comparison on it (``modelled``)."""
    emulated = on.emulated or off.emulated
    # Emulated: everything by counted instructions (time there is the emulator's); else by time.
    by = INSTRUCTIONS if emulated and on.basis == off.basis == INSTRUCTIONS else TIME
    counted = by == INSTRUCTIONS
    with warnings.catch_warnings():  # the report says it itself: "(1-process CI)" (table.speedup)
        warnings.simplefilter("ignore", OneProcessIntervalWarning)
        try:
            speedup = None if emulated else on.speedup_over(off).as_dict()
        except RunnerError:  # every run of a side disturbed: no speedup to show, and the report still stands
            speedup = None
    categories = _category_rows(on, off, by, emulated)
    operators = _operator_rows(on, off, by, emulated, top)
    off_shares, on_shares = off.shares_by(by), on.shares_by(by)
    return {
        "model": on.model,
        "recipe": on.recipe,
        # A language model's phase (measure/llm.py): its prefill and decode pairs are told apart by it.
        "phase": (on.metadata.get("llm") or {}).get("phase"),
        "on": on.variant,
        "off": off.variant,
        "threads": _threads(on),
        "emulated": emulated,
        "note": EMULATED_NOTE if emulated else None,
        "speedup": speedup,
        "unit": by,  # what shares and amounts measure: time (ms) or instructions (counted, emulated)
        "fewer_instructions": _fewer(off.instructions_per_inference or 0, on.instructions_per_inference or 0)
        if counted
        else None,
        "on_median_ms": None if emulated else on.median_ms,
        "off_median_ms": None if emulated else off.median_ms,
        "bottleneck_off": max(off_shares, key=lambda k: off_shares[k]),
        "bottleneck_on": max(on_shares, key=lambda k: on_shares[k]),
        "categories": categories,
        "operators": operators,
        "kernels": _kernel_comparison(on, off),
        # Measured time only: on the emulated target the device model names slowdowns (``modelled``).
        "slower_with_sme2": None if emulated else [s.as_dict() for s in sme2_slowdowns(on, off)],
        "modelled": modelled_comparison(on, off, device) if counted and device else None,
    }


def _category_rows(on: Profile, off: Profile, by: str, emulated: bool) -> list[dict[str, Any]]:
    """Each category off and on: shares, and medians in ms or counted instructions, with the speedup when timed."""
    counted = by == INSTRUCTIONS
    on_cat, off_cat = on.category_values(by), off.category_values(by)
    categories = []
    for category in Category:
        name = category.value
        off_value, on_value = float(np.median(off_cat[name])), float(np.median(on_cat[name]))
        categories.append(
            {
                "category": name,
                "off_share": off.share(category, by),
                "on_share": on.share(category, by),
                "off_median_ms": None if counted or emulated else off_value,  # emulated time is not time
                "on_median_ms": None if counted or emulated else on_value,
                "off_instructions": off_value if counted else None,
                "on_instructions": on_value if counted else None,
                "fewer_instructions": _fewer(off_value, on_value) if counted else None,
                "speedup": None
                if emulated
                else _ratio(off_cat[name].to_numpy(), on_cat[name].to_numpy(), off.run_groups, on.run_groups),
            }
        )
    return categories


def _operator_rows(on: Profile, off: Profile, by: str, emulated: bool, top: int) -> list[dict[str, Any]]:
    """The ``top`` operators off and on, paired across variants (match_ops), by the larger of their two shares;
    bootstrap intervals only for those shown (they cost ~20 ms each)."""
    counted = by == INSTRUCTIONS
    on_ops, off_ops = per_run_by_op(on, by), per_run_by_op(off, by)
    on_total = float(on.category_values(by).sum(axis=1).sum())
    off_total = float(off.category_values(by).sum(axis=1).sum())
    operators = []
    for off_name, on_name in match_ops(on_ops, off_ops):
        either = off_name or on_name
        assert either is not None  # match_ops pairs at least one side
        name = either
        c_on = classify(on_name) if on_name else None
        c_off = classify(off_name) if off_name else None
        off_runs = off_ops.get(off_name) if off_name else None
        on_runs = on_ops.get(on_name) if on_name else None
        operators.append(
            {
                "op": name,
                "off_op": off_name,
                "on_op": on_name,
                "category": (c_off or c_on).category.value,  # type: ignore[union-attr]
                "portable": (c_off or c_on).portable,  # type: ignore[union-attr]
                "off_packed": bool(c_off and c_off.packed),
                "on_packed": bool(c_on and c_on.packed),
                "off_median_ms": float(np.median(off_runs)) if off_runs is not None and not emulated else None,
                "on_median_ms": float(np.median(on_runs)) if on_runs is not None and not emulated else None,
                "off_instructions": float(np.median(off_runs)) if off_runs is not None and counted else None,
                "on_instructions": float(np.median(on_runs)) if on_runs is not None and counted else None,
                "off_share": float(off_runs.sum() / off_total) if off_runs is not None and off_total > 0 else 0.0,
                "on_share": float(on_runs.sum() / on_total) if on_runs is not None and on_total > 0 else 0.0,
                "speedup": None,
            }
        )
    operators.sort(key=lambda op: max(op["off_share"], op["on_share"]), reverse=True)
    operators = operators[:top]  # bootstrap intervals only for the operators shown (they cost ~20 ms each)
    for op in operators:
        if not emulated and op["off_op"] is not None and op["on_op"] is not None:
            op["speedup"] = _ratio(off_ops[op["off_op"]], on_ops[op["on_op"]], off.run_groups, on.run_groups)
        op["fewer_instructions"] = (
            _fewer(op["off_instructions"], op["on_instructions"])
            if counted and op["off_instructions"] and op["on_instructions"]
            else None
        )
    return operators


def _kernel_comparison(on: Profile, off: Profile) -> dict[str, Any] | None:
    """Kernels SME2 on vs off, in sampled time (both variants' kernels sampled), else None."""
    k_on, k_off = on.kernel_time, off.kernel_time
    if k_on is None or k_off is None or not k_on.available or not k_off.available:
        return None
    return {
        "sme_share_on": k_on.kind_share(),
        "sme_share_off": k_off.kind_share(),
        "kind_ms_on": k_on.kind_ms(),
        "kind_ms_off": k_off.kind_ms(),
        "top_on": k_on.top_kernels(),
        "top_off": k_off.top_kernels(),
    }


def build_test_entry(nodeid: str, profiles: list[Profile], device: "str | DeviceModel | None" = None) -> dict[str, Any]:
    """Everything the reports show about one test, as JSON-ready data; ``device``: the device model whose
    modelled time comparisons of counted runs also carry (--sme2-device)."""
    return {
        "nodeid": nodeid,
        "profiles": [p.to_dict() for p in profiles],
        "comparisons": [compare(on, off, device=device) for on, off in pair_variants(profiles)],
    }


def modelled_comparison(on: Profile, off: Profile, device: "str | DeviceModel") -> dict[str, Any]:
    """SME2 on against off priced on a device model (device_model.py): modelled ms and speedup, end to end and
    per category, and the operators modelled slower with SME2; or why the model refused these profiles.
    ``device``: a DeviceModel (the plugin's, read once at configure) or a name or path to read now."""
    from pytest_sme2.errors import UsageError
    from pytest_sme2.profile.device_model import DeviceModel, device_of

    try:
        model = device_of(device)  # one read for both profiles
        m_on, m_off = on.modelled(model), off.modelled(model)
    except UsageError as exc:
        return {"device": device.name if isinstance(device, DeviceModel) else str(device), "refused": str(exc)}
    speedup = m_on.speedup_over(m_off)
    slower = m_on.slower_than(m_off)
    # A language model's phase (measure/llm.py): its modelled time per run, as tokens per second.
    tokens = (on.metadata.get("llm") or {}).get("tokens_per_run")
    per_second = (
        {}
        if not tokens
        else {
            "tokens_per_s": {
                side: tokens / (ms / 1e3) if ms > 0 else None
                for side, ms in (("on", m_on.e2e_ms), ("off", m_off.e2e_ms))
            }
        }
    )
    return {
        **per_second,
        "device": m_on.device.name,
        "label": m_on.device.label,
        "validation": m_on.device.validation,
        "on_ms": m_on.e2e_ms,
        "off_ms": m_off.e2e_ms,
        "speedup": speedup.value,
        "categories": [
            {
                "category": c,
                "on_ms": m_on.category_ms[c],
                "off_ms": m_off.category_ms[c],
                "speedup": None if not np.isfinite(v) else float(v),
            }
            for c, v in speedup.by_category.items()
        ],
        "slower_with_sme2": [
            {
                "identity": r.identity,
                "category": r.category,
                "on_ms": r.modelled_ms,
                "off_ms": r.other_ms,
                "ratio": r.ratio,
            }
            for r in slower.itertuples()
        ],
    }


def _baseline_outcome(outcome: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Verdict rows from the baseline gate's ``sme2_baseline`` property (gate.new_outcome: its verdicts typed, as
    ``Verdict.as_dict``; files and messages as text). Each verdict is rendered to its line here, where it is shown."""
    if outcome.get("findings"):  # the failure as the terminal gives it: root cause first, the update command last
        rows = [{"verdict": "regression", "message": m} for m in outcome["findings"]]
    else:  # failing verdicts without their findings: one row per failing verdict
        rows = [{"verdict": "regression", "message": str(Verdict.from_dict(v))} for v in outcome.get("failed", [])]
        if rows:  # what explains them without failing (the operators that changed, another setup)
            rows += [{"verdict": "note", "message": str(Verdict.from_dict(v))} for v in outcome.get("notes", [])]
    rows += [{"verdict": "no baseline", "message": m} for m in outcome.get("missing", [])]
    rows += [{"verdict": "baseline written", "message": m} for m in outcome.get("written", [])]
    rows += [{"verdict": "baseline not written", "message": m} for m in outcome.get("not_written", [])]
    rows += [
        {"verdict": "baseline unchanged", "message": f"{m} (its records equal this run's: kept as it was)"}
        for m in outcome.get("unchanged", [])
    ]
    if not rows:  # passed: each verdict as it was judged (an inconclusive one is no "ok")
        judged = [Verdict.from_dict(v) for v in outcome.get("verdicts", [])]
        rows += [{"verdict": shown_status(v), "message": str(v)} for v in judged]
    return rows


# The statuses a passing test's verdicts are shown by, as the terminal's baseline summary counts them; any other
# (ok, a skipped check, a note) reads "ok".
_SHOWN_STATUSES = (Status.INCONCLUSIVE, Status.IMPROVEMENT)


def shown_status(verdict: Verdict) -> str:
    """ "inconclusive" or "improvement" for a verdict of those, else "ok"."""
    return verdict.status.value if verdict.status in _SHOWN_STATUSES else "ok"


def verdicts_of(properties: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Baseline verdicts a test's reports carry (see docs/artifacts.md, "Verdicts").

    Read from the ``sme2_verdicts`` user property (a dict or list of dicts with
    at least ``verdict``) and from the baseline gate's ``sme2_baseline``
    property (its failed / missing / written / verdicts message lists).
    """
    found: list[dict[str, Any]] = []
    for key, value in properties:
        if key == "sme2_baseline" and isinstance(value, Mapping):
            found += _baseline_outcome(value)
        if key != "sme2_verdicts":
            continue
        for verdict in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(verdict, Mapping):
                found.append(dict(verdict))
            else:
                found.append({"verdict": str(verdict)})
    unique: list[dict[str, Any]] = []
    for verdict in found:
        if verdict not in unique:
            unique.append(verdict)
    return unique


def verdict_text(verdicts: list[Mapping[str, Any]], with_cause: bool = False) -> str:
    """One short word or phrase for a table cell; ``with_cause``: a regression's headline after it (the reports'
    summary tables, which said only "regression" with the cause 2,500 px further down: issue 65)."""
    if not verdicts:
        return "no baseline check"
    words = [str(v.get("verdict") or v.get("status") or "?") for v in verdicts]
    cause = headline(verdicts) if with_cause else None
    return ", ".join(dict.fromkeys(words)) + (f": {cause}" if cause else "")


def message_lines(verdict: Mapping[str, Any]) -> list[str]:
    """A verdict's message as its non-blank lines, indentation kept: the first is its headline."""
    return [line for line in str(verdict.get("message", "")).splitlines() if line.strip()]


def headline(verdicts: list[Mapping[str, Any]]) -> str | None:
    """The first line of the first regression's message: the cause as the failing test's first line gives it."""
    for verdict in verdicts:
        if verdict.get("verdict") == "regression":
            lines = message_lines(verdict)
            if lines:
                return lines[0].strip()
    return None

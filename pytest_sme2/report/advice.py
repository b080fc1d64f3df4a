"""Recommendations: what to look at next, read off a test entry.

Each rule names its evidence (operator, share, variant) so a reader can check
it. The rules are the ones the reference kit's reports make by hand: portable
operators worth delegating, where the bottleneck moved after SME2, an SME2
variant whose CONV/GEMM did not take the SME path, and low delegation.
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.evidence.categories import Category
from pytest_sme2.profile.profile_json import WORTH_DELEGATING
from pytest_sme2.report.table import category_change

SME_PATH_EXPECTED = 0.5  # an SME2-on variant below this share of CONV+GEMM in SME kernels is suspicious
DELEGATION_EXPECTED = 0.9
_NEXT_STEPS = {
    Category.DATA_MOVEMENT.value: "transposes, layout and dtype conversions, copies",
    Category.ELEMENTWISE.value: "activations and arithmetic that could be fused",
    Category.OTHER.value: "pooling, normalisation, softmax, portable kernels and delegate overhead",
    Category.CONV.value: "convolutions without an SME path (depthwise)",
    Category.GEMM.value: "matrix multiplications",
}


def _measure(profile: Mapping[str, Any]) -> str:
    """What a profile's shares measure: time, or instructions counted on the emulated target."""
    return "instructions" if profile.get("basis") == "instructions" else "time"


def _sme_path_advice(profile: Mapping[str, Any]) -> str | None:
    """An SME2-on variant whose CONV/GEMM shows little SME path: what the names and the kernel trace say.

    Packed formats in operator names (PF32, PF16, PQS8) are SME evidence; QP8 is not (the int8 dynamic
    GEMM keeps that name with NEON kernels too), so where a kernel trace exists it has the last word.
    """
    share = profile.get("sme_path_share")
    if profile.get("sme2") is not True or share is None or share >= SME_PATH_EXPECTED:
        return None
    measure = {"work": "multiply-accumulates"}.get(profile.get("sme_path_basis") or "", _measure(profile))
    executed = profile.get("executed_sme_kernels")
    if executed:
        return (
            f"{profile['variant']}: {share:.0%} of CONV+GEMM {measure} is in operators with packed SME formats "
            f"(PF32/PF16/PQS8), and the kernel trace shows {len(executed)} SME/SME2 kernel(s) executed: names "
            f"undercount SME here (QP8 GEMMs keep their name on SME2 kernels); the rest is operators without an "
            f"SME kernel, such as depthwise convolutions."
        )
    trace = "" if executed is None else " and the kernel trace shows no SME kernel executed"
    return (
        f"{profile['variant']}: only {share:.0%} of CONV+GEMM {measure} ran packed SME kernels (PF32/PF16/PQS8; "
        f"QP8 is not SME evidence){trace}; check that the dtype has SME2 kernels and the CPU really has SME2."
    )


def recommendations(test_entry: Mapping[str, Any]) -> list[str]:
    advice: list[str] = []
    worst: dict[str, tuple[float, str, str]] = {}
    for profile in test_entry["profiles"]:
        measure = _measure(profile)
        if profile.get("emulated") and measure != "instructions":
            continue  # no counts, and emulator time is not time: nothing to weigh portable operators by
        for op in profile.get("portable_ops", []):
            share = op["instruction_share"] if measure == "instructions" else op["share"]
            if share > WORTH_DELEGATING and share > worst.get(op["op"], (0.0, "", ""))[0]:
                worst[op["op"]] = (share, profile["variant"], measure)
        sme = _sme_path_advice(profile)
        if sme:
            advice.append(sme)
        if profile["delegation_coverage"] < DELEGATION_EXPECTED:
            advice.append(
                f"{profile['variant']}: only {profile['delegation_coverage']:.0%} of E2E {measure} is "
                f"delegated; see the portable operators."
            )
    for op, (share, variant, measure) in sorted(worst.items(), key=lambda item: -item[1][0]):
        advice.append(
            f"Delegate `{op}`: it runs in the portable runtime and takes {share:.0%} of E2E {measure} on " f"{variant}."
        )
    for comparison in test_entry.get("comparisons", []):
        off, on = comparison["bottleneck_off"], comparison["bottleneck_on"]
        on_share = next(c["on_share"] for c in comparison["categories"] if c["category"] == on)
        measure = "instructions" if comparison.get("unit") == "instructions" else "time"
        if off != on:  # the old largest fell, the new one need not have grown: say what SME2 did to each
            shares = {c["category"]: c for c in comparison["categories"]}
            fell, other = category_change(shares[off]), category_change(shares[on])
            what = f"{_verb(shares[off])} {fell}" if fell else "fell"
            advice.append(
                f"With SME2, {off} {what} ({shares[off]['off_share']:.0%} -> "
                f"{shares[off]['on_share']:.0%} of E2E {measure}) and {on}{f' ({other})' if other else ''} is now the "
                f"largest ({on_share:.0%}): optimise {on} next ({_NEXT_STEPS[on]})."
            )
    return list(dict.fromkeys(advice))


def _verb(category: Mapping[str, Any]) -> str:
    """ "needs" (counted instructions: "needs 16.70x fewer instr") or "is" ("is 5.00x faster"); "fell" alone."""
    if category.get("fewer_instructions") is not None:
        return "needs"
    return "is" if (category.get("speedup") or {}).get("value") is not None else "fell"

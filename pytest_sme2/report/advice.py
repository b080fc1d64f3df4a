"""Recommendations: what to look at next, read off a test record.

Each rule names its evidence (operator, share, variant) so a reader can check
it. The rules are the ones the reference kit's reports make by hand: portable
operators worth delegating, where the bottleneck moved after SME2, an SME2
variant whose CONV/GEMM did not take the SME path, and low delegation.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..categories import Category
from .record import WORTH_DELEGATING

SME_PATH_EXPECTED = 0.5  # an SME2-on variant below this share of CONV+GEMM in SME kernels is suspicious
DELEGATION_EXPECTED = 0.9
_NEXT_STEPS = {
    Category.DATA_MOVEMENT.value: "transposes, layout and dtype conversions, copies",
    Category.ELEMENTWISE.value: "activations and arithmetic that could be fused",
    Category.OTHER.value: "pooling, normalisation, softmax, portable kernels and delegate overhead",
    Category.CONV.value: "convolutions without an SME path (depthwise)",
    Category.GEMM.value: "matrix multiplications",
}


def recommendations(record: Mapping[str, Any]) -> list[str]:
    advice: list[str] = []
    emulated = any(p.get("emulated") for p in record["profiles"])
    timing = " (emulated timing)" if emulated else ""
    worst: dict[str, tuple[float, str]] = {}
    for profile in record["profiles"]:
        for op in profile.get("portable_ops", []):
            if op["share"] > WORTH_DELEGATING and op["share"] > worst.get(op["op"], (0.0, ""))[0]:
                worst[op["op"]] = (op["share"], profile["variant"])
        share = profile.get("sme_path_share")
        if profile.get("sme2") is True and share is not None and share < SME_PATH_EXPECTED:
            advice.append(f"{profile['variant']}: only {share:.0%} of CONV+GEMM time ran SME/SME2 kernels; check that "
                          "the dtype has SME2 kernels (packed PF32/PF16/QP8 formats) and the CPU really has SME2.")
        if profile["delegation_coverage"] < DELEGATION_EXPECTED:
            advice.append(f"{profile['variant']}: only {profile['delegation_coverage']:.0%} of E2E time is delegated"
                          f"{timing}; see the portable operators.")
    for op, (share, variant) in sorted(worst.items(), key=lambda item: -item[1][0]):
        advice.append(f"Delegate `{op}`: it runs in the portable runtime and takes {share:.0%} of E2E on {variant}"
                      f"{timing}.")
    for comparison in record.get("comparisons", []):
        off, on = comparison["bottleneck_off"], comparison["bottleneck_on"]
        on_share = next(c["on_share"] for c in comparison["categories"] if c["category"] == on)
        if off != on:
            advice.append(f"With SME2 the largest category moved from {off} to {on} ({on_share:.0%} of E2E{timing}): "
                          f"optimise {on} next ({_NEXT_STEPS[on]}).")
    return list(dict.fromkeys(advice))

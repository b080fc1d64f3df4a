"""Assertion helpers whose failures print the numbers, the bound and the variant.

Plain ``assert on.speedup_over(off).low >= 2.0`` also works (the reprs of
Speedup and Profile carry the same facts); these helpers add the wording and
check bounds on the right end of the interval.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Sequence

import pytest

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import Category
from pytest_sme2.evidence.kernel_sampling import SME_CATEGORIES, SME_KINDS
from pytest_sme2.export.export import ExportedModel
from pytest_sme2.profile.breakdown import BASES, TIME
from pytest_sme2.profile.device_model import time_text
from pytest_sme2.profile.op_pairs import MIN_SLOWDOWN, sme2_slowdowns
from pytest_sme2.profile.profile import Profile
from pytest_sme2.profile.speedup import ONE_PROCESS_CAVEAT, Speedup
from pytest_sme2.run.targets.base import EMULATED_TIMING

if TYPE_CHECKING:
    from pytest_sme2.measure.thread_scaling import ThreadScaling


def assert_speedup(this: Profile, other: Profile, at_least: float) -> Speedup:
    """Fail unless the lower confidence bound of this-over-other speedup is >= ``at_least``."""
    speedup = this.speedup_over(other)
    if not speedup.low >= at_least:
        raise AssertionError(
            f"speedup of {speedup.this} over {speedup.other} is {speedup.value:.2f}x with "
            f"{speedup.confidence:.0%} CI [{speedup.low:.2f}, {speedup.high:.2f}]; the lower bound "
            f"{speedup.low:.2f} is below the required {at_least:.2f}x "
            f"(medians {speedup.this_median_ms:.3f} ms vs {speedup.other_median_ms:.3f} ms, "
            f"{speedup.this_runs} and {speedup.other_runs} runs)"
            + (f"; {ONE_PROCESS_CAVEAT}" if speedup.within_one_process else "")
        )
    return speedup


def _basis(profile: Profile, by: str | None, allowed: tuple[str, ...]) -> str:
    """The measure an assertion reads: ``by``, else the profile's basis (time; instructions when emulated).
    Emulated time decides nothing: asking for it there is an error that says what to use instead."""
    basis = by or profile.basis
    if basis not in allowed:
        raise ValueError(f"by={basis!r}: use one of {', '.join(allowed)}")
    if basis == TIME and profile.emulated:
        raise AssertionError(
            f"{profile.label}: {EMULATED_TIMING}; assert by='instructions' (the default there), "
            f"which the emulated target counts exactly"
        )
    return basis


def assert_share(
    profile: Profile,
    category: str | Category,
    *,
    at_most: float | None = None,
    at_least: float | None = None,
    by: str | None = None,
) -> float:
    """Fail if a category's share of E2E is outside [at_least, at_most].

    By ``profile.basis`` unless ``by`` says: time on hardware, instructions on the emulated target.
    """
    basis = _basis(profile, by, BASES)
    name = Category.parse(category).value
    share = profile.share(name, basis)
    shares = ", ".join(f"{k} {v:.1%}" for k, v in profile.shares_by(basis).items())
    if at_most is not None and not share <= at_most:
        raise AssertionError(
            f"{profile.label}: {name} share of {basis} is {share:.1%}, above the allowed {at_most:.1%} "
            f"(all shares: {shares})"
        )
    if at_least is not None and not share >= at_least:
        raise AssertionError(
            f"{profile.label}: {name} share of {basis} is {share:.1%}, below the required {at_least:.1%} "
            f"(all shares: {shares})"
        )
    return share


def assert_delegation(profile: Profile, at_least: float, *, by: str | None = None) -> float:
    """Fail if delegation coverage is below ``at_least``: by "time", "instructions" (default: the profile's
    basis) or "nodes" (the export-time graph)."""
    by = "nodes" if by == "nodes" else _basis(profile, by, (*BASES, "nodes"))
    coverage = profile.coverage(by) if by != "nodes" else profile.node_delegation_coverage
    if coverage is None or not coverage >= at_least:
        portable = profile.portable_ops
        heaviest = ", ".join(f"{r.op} ({r.share:.1%})" for r in portable.head(5).itertuples()) or "none"
        shown = "unknown (no export-time delegation record)" if coverage is None else f"{coverage:.1%}"
        raise AssertionError(
            f"{profile.label}: delegation coverage by {by} is {shown}, below the required {at_least:.1%}; "
            f"heaviest portable operators: {heaviest}"
        )
    return coverage


def assert_portable_ops(profile: Profile, allowed: "set[str] | frozenset[str] | list[str]") -> None:
    """Fail if an operator outside ``allowed`` ran outside the delegate (it fell out of it).

    ``allowed`` holds ATen op names as in ``native_call_<op>.<overload>``,
    e.g. {"native_layer_norm", "_to_dim_order_copy"}.
    """
    portable = profile.portable_ops
    unexpected = portable[~portable["kind"].isin(set(allowed))]
    if not unexpected.empty:
        listed = ", ".join(f"{r.kind} ({r.count}x, {r.share:.1%} of E2E)" for r in unexpected.itertuples())
        raise AssertionError(
            f"{profile.label}: operators fell out of the delegate and ran as portable kernels: {listed}; "
            f"allowed portable ops: {', '.join(sorted(allowed)) or 'none'}"
        )


def _measure(profile: Profile) -> str:
    """What a profile's SME path share measures, in words."""
    return {"work": "multiply-accumulates"}.get(profile.sme_path_basis, profile.sme_path_basis)


def assert_sme2_kernel_path(on: Profile, off: Profile, at_least: float) -> None:
    """Fail unless SME2 on runs packed SME kernels for ``at_least`` of CONV+GEMM time and SME2 off runs none.

    Where the target traced kernels (emulated), also requires executed SME2
    kernels with SME2 on and no SME code at all with it off.
    """

    def shown(profile: Profile) -> str:
        heavy = profile.ops[profile.ops["category"].isin([Category.CONV.value, Category.GEMM.value])]
        kinds = ", ".join(sorted(set(heavy["op"]))) or "none"
        share = "n/a" if profile.sme_path_share is None else f"{profile.sme_path_share:.1%}"
        return (
            f"{profile.label}: SME path {share} of CONV+GEMM {_measure(profile)}, "
            f"{profile.sme_path_ops} ops; CONV+GEMM operators: {kinds}"
        )

    share = on.sme_path_share
    if share is None or not share >= at_least:
        raise AssertionError(
            f"with SME2 on, less than {at_least:.0%} of CONV+GEMM {_measure(on)} took packed SME "
            f"kernels. {shown(on)}"
        )
    if off.sme_path_share not in (0.0, None) or off.sme_path_ops:
        raise AssertionError(f"with SME2 off, operators still took packed SME kernels. {shown(off)}")
    traced_on, traced_off = on.executed_sme_kernels, off.executed_sme_kernels
    if traced_on is not None and not any("sme2" in kernel for kernel in traced_on):
        raise AssertionError(
            f"{on.label}: the kernel trace shows no SME2 kernel executed "
            f"(SME kernels seen: {', '.join(traced_on) or 'none'})"
        )
    if traced_off:
        raise AssertionError(f"{off.label}: SME kernels executed with SME2 off: {', '.join(traced_off)}")


def assert_kernel_share(
    profile: Profile,
    at_least: float,
    *,
    kinds: Sequence[str] = SME_KINDS,
    categories: Sequence[str] | None = SME_CATEGORIES,
) -> float:
    """Fail unless ``at_least`` of the sampled time of ``categories``' operators went to kernels of ``kinds``
    (default: SME or SME2 kernels in CONV and GEMM time); returns the share.

    Needs kernel sampling (``--sme2-kernel-sampling=on``, local or adb target); where there is no
    sampled kernel time (sampling off, the emulated target, perf missing) the test is skipped
    with the reason, since there is nothing to assert on.
    """
    kernel_time = profile.kernel_time
    if kernel_time is None:
        pytest.skip(
            f"{profile.label}: kernel time was not sampled; run with --sme2-kernel-sampling=on "
            "(ini sme2_kernel_sampling = true) on the local or adb target"
        )
    if not kernel_time.available:
        pytest.skip(f"{profile.label}: no kernel time: {kernel_time.problem}")
    share = kernel_time.kind_share(kinds, categories)
    where = "all operators" if categories is None else "+".join(categories) + " operators"
    if share is None or not share >= at_least:
        top = "; ".join(
            f"{k['kernel']} ({k['kind']}, {k['ms_per_run']:.3f} ms/run)" for k in kernel_time.top_kernels(5)
        )
        raise AssertionError(
            f"{profile.label}: {'no samples' if share is None else f'{share:.1%}'} of the sampled "
            f"time of {where} went to {'/'.join(kinds)} kernels, less than {at_least:.0%}. "
            f"Top kernels: {top or 'none'}"
        )
    return share


# Default output tolerance per dtype, as a fraction of the largest |eager output|. Measured
# under emulation, largest difference over output scale: fp32 about 1e-6; fp16 0.7% (toy_cnn,
# mlp) to 2.7% (mobilenet_v3_small, 50 layers); int8 against the quantized model in eager 1%
# (transformer) to 8.4% (mobilenet: rounding differences add up over depth). A wrong kernel
# is off by the order of the outputs themselves.
OUTPUT_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-2, "int8": 0.15}


def _output_leaves(reference: Any) -> list[tuple[str, Any]]:
    """The eager outputs as the runtime gives them, each with its path (``output['b']``, ``output[1][0]``).

    torch.export flattens a program's outputs with torch's pytree (dicts in key order, nested tuples and
    lists depth first, None dropped) and ExecuTorch returns them in that order, so the same flattening of
    the eager reference lines up leaf by leaf with the runtime's outputs.
    """
    from torch.utils import _pytree

    leaves, _ = _pytree.tree_flatten_with_path(reference)
    return [(f"output{_pytree.keystr(path)}", leaf) for path, leaf in leaves]


def assert_outputs_match(
    profile: Profile, exported: "ExportedModel", rtol: float = 0.0, atol: float | None = None
) -> float:
    """Fail unless the run's outputs equal PyTorch eager (recorded at export) within tolerance.

    ``atol`` defaults to ``OUTPUT_TOLERANCE[dtype]`` times the largest |eager output|,
    so one setting serves models whose outputs have different scales. The failure
    names the largest difference, where it is, and both values. Returns the
    largest absolute difference.
    """
    import torch

    outputs_path = profile.artifacts.get("outputs")
    if outputs_path is None:
        raise AssertionError(f"{profile.label}: the run kept no outputs to compare")
    produced = torch.load(outputs_path, weights_only=True)
    reference = torch.load(exported.reference_outputs_path, weights_only=True)
    named = _output_leaves(reference)
    if len(produced) != len(named):
        names = ", ".join(name for name, _ in named[:8]) + (", ..." if len(named) > 8 else "")
        raise AssertionError(
            f"{profile.label}: {len(produced)} outputs, eager gave {len(named)} tensors ({names}) "
            f"in {exported.reference_outputs_path}"
        )
    worst = 0.0
    for got, (name, want) in zip(produced, named):
        got, want = torch.as_tensor(got).to(torch.float64), torch.as_tensor(want).detach().to(torch.float64)
        if got.shape != want.shape:
            raise AssertionError(f"{profile.label}: {name} has shape {tuple(got.shape)}, eager {tuple(want.shape)}")
        scale = float(want.abs().max()) if want.numel() else 0.0
        allowed = atol if atol is not None else OUTPUT_TOLERANCE[exported.recipe.dtype] * scale
        if not want.numel():
            continue
        diff = (got - want).abs()
        excess = diff - (allowed + rtol * want.abs())
        flat = int(torch.argmax(excess))
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
        if excess.flatten()[flat] > 0:
            raise AssertionError(
                f"{profile.label}: {name} differs from PyTorch eager beyond atol={allowed:.3g}"
                f"{f', rtol={rtol}' if rtol else ''}: largest difference {float(diff.max()):.3g} "
                f"(eager output scale {scale:.3g}); worst element {where}: got {float(got[where]):.6g}, "
                f"eager {float(want[where]):.6g}. Outputs: {outputs_path}"
            )
        worst = max(worst, float(diff.max()))
    return worst


def assert_no_sme2_slowdown(on: Profile, off: Profile, *, min_slowdown: float = MIN_SLOWDOWN) -> None:
    """Fail when an operator is measured slower with SME2 on than off: its median time on over off, with a
    bootstrap interval over the undisturbed runs of each wholly above ``1 + min_slowdown``, Bonferroni-corrected
    over the operators compared so the whole list holds at 95% (op_pairs.py). The
    batch-1 GEMV case where packed SME2 kernels lose to NEON (XNNPACK #10719), on a phone or an SME2 machine.
    Emulated profiles are refused (their time is the emulator's): use assert_no_modelled_sme2_slowdown there."""
    slower = sme2_slowdowns(on, off, min_slowdown)
    if slower:
        raise AssertionError(
            f"{len(slower)} operator(s) measured slower with SME2 on ({on.label}) than off "
            f"({off.label}):\n" + "\n".join(f"  {s}" for s in slower)
        )


def assert_sme2_not_slower_at_any_threads(scaling: "ThreadScaling") -> None:
    """Fail when SME2 on is significantly slower than off at any thread count of ``scaling`` (the
    sme2_thread_scaling fixture's answer): its speedup's 95% interval wholly below 1, as a shared SME unit under
    contention can make it (onnxruntime #27633). Names each thread count with its speedup and interval."""
    slower = scaling.slower()
    if slower:
        lines = [
            f"  {row.threads} thread(s): {row.speedup.value:.2f}x [{row.speedup.low:.2f}, {row.speedup.high:.2f}] "
            f"(off {row.off.median_ms:.3f} ms, on {row.on.median_ms:.3f} ms)"
            for row in slower
        ]
        raise AssertionError(
            f"SME2 on is slower than off for {scaling.model} {scaling.recipe} at "
            f"{len(slower)} thread count(s):\n" + "\n".join(lines) + f"\n{scaling}"
        )


def assert_no_modelled_sme2_slowdown(
    on: Profile, off: Profile, device: str = "apple-m4", *, tolerance: float = 0.0
) -> None:
    """Fail when the device model prices an operator slower with SME2 on than off (by more than ``tolerance``,
    a fraction), naming each with its modelled ms on and off: the batch-1 GEMV case where packed SME2 kernels
    lose to NEON (XNNPACK #10719). Modelled time, not measured: emulated profiles (docs/device_model.md)."""
    __tracebackhide__ = True
    if isinstance(tolerance, bool) or not (isinstance(tolerance, numbers.Real) and 0 <= tolerance < math.inf):
        raise UsageError(
            f"assert_no_modelled_sme2_slowdown(tolerance={tolerance!r}): the fraction an operator may be "
            f"slower with SME2 before it fails, a number >= 0 (0.1: 10%)"
        )
    asked = tuple((p.metadata.get("run") or {}).get("sme2") for p in (on, off))
    if asked == (False, True):  # swapped profiles would name NEON kernels as the SME2 side
        raise UsageError(
            f"assert_no_modelled_sme2_slowdown(on, off): {on.label} ran with SME2 off and {off.label} "
            f"with SME2 on; pass the SME2-on profile first"
        )
    slower = on.modelled(device).slower_than(off.modelled(device), by=1.0 + tolerance)
    if len(slower):
        lines = [
            f"  {row.identity} ({row.category}): {time_text(row.other_ms)} off -> {time_text(row.modelled_ms)} "
            f"on ({row.ratio:.2f}x slower; {row.event})"
            for row in slower.itertuples()
        ]
        raise AssertionError(
            f"{len(slower)} operator(s) modelled slower with SME2 on than off on {device} "
            f"(a model, not a measurement):\n" + "\n".join(lines)
        )

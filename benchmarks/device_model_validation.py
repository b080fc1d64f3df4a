"""Modelled against published: SqueezeSAM FP16, one thread, SME2 on and off, on a device model.

Why: a device model is worth showing only once it is compared with hardware (docs/device_model.md,
"Validation"). This exports benchmarks/models/squeeze_sam.py (FP16, XNNPACK), counts one inference with
SME2 on and one with SME2 off on the emulated target, prices both on the device model and prints the
table of published, modelled and error, end to end and per category:

    python benchmarks/device_model_validation.py [--device apple-m4] [--cache-dir DIR] [--json out.json]

``--model fully_connected`` does the same for the one-layer 100x640 -> 1280 fp32 model of a published LiteRT
measurement (benchmarks/models/fully_connected.py): modelled ms and GFLOPS, SME2 off and on, against the
published ones (minutes, not hours).

The export and the counted runs are cached (the export cache and the emulated result cache in
--cache-dir), so a second run only re-prices. ``--save-counts FILE`` keeps what pricing needs (per operator
its instruction mix, bytes and graph node) as JSON, and ``--counts FILE`` prices such a file with no export
or emulation at all: benchmarks/results/device_model_2026-11-27/ holds the counted runs so far, so a device
file can be compared in seconds (``--sides on`` saves one side of a count that cannot finish in one go). A first
run is long on a 2-core x86 machine: the export 3 minutes, the SME2-on inference 19 minutes (qemu emulates FP16
outer products in software floating point), the SME2-off one well over half an hour (benchmarks/results/notebook.md,
stop 39): start it in the background.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Arm's learning path "SME2 profiling with ExecuTorch" (archived report of 2025-12-02) and the pytorch.org blog on
# ExecuTorch and SME2: SqueezeSAM, FP16 (bilinear export), one thread, median ms, SME2 off and on.
PUBLISHED = {
    "apple-m4": {
        "off": {"E2E": 320.42, "CONV": 277.6, "GEMM": 8.4, "ELEMENTWISE": 0.6, "DATA_MOVEMENT": 13.6, "OTHER": 22.8},
        "on": {"E2E": 72.67, "CONV": 34.4, "GEMM": 1.4, "ELEMENTWISE": 0.6, "DATA_MOVEMENT": 14.5, "OTHER": 22.4},
    },
    "dimensity-9500": {
        "off": {"E2E": 1131.6, "CONV": 846.4, "GEMM": 29.6, "ELEMENTWISE": 1.5, "DATA_MOVEMENT": 116.0, "OTHER": 84.0},
        "on": {"E2E": 303.2, "CONV": 97.7, "GEMM": 7.0, "ELEMENTWISE": 1.5, "DATA_MOVEMENT": 110.2, "OTHER": 87.2},
    },
}
CATEGORIES = ("CONV", "GEMM", "ELEMENTWISE", "DATA_MOVEMENT", "OTHER")
# Arm's learning path "Accelerate LiteRT models with SME2" (learn.arm.com, litert-sme): one fully connected layer,
# batch 100, 640 -> 1280, fp32, LiteRT with XNNPACK and KleidiAI, one thread, on an SME2 Android phone (the page
# does not name its SoC): 129 GFLOPS without SME2 and 429 with it. ms = its 163.84 MFLOP over those rates.
FC_FLOP = 2 * 100 * 640 * 1280
FC_PUBLISHED_GFLOPS = {"off": 129.0, "on": 429.0}
FC_PUBLISHED_DEVICE = "an SME2 Android phone (LiteRT, XNNPACK + KleidiAI, one thread; SoC not named)"
# model -> (dtype, warmup inferences before the counted one): SqueezeSAM counts its first inference (a warmup
# costs 20-40 more minutes of emulation); the layer is cheap, so its counted inference follows a warmup one.
MODELS = {"squeeze_sam": ("fp16", 0), "fully_connected": ("fp32", 1)}


def counted_profiles(
    cache_dir: Path, session_dir: Path, sides: tuple[bool, ...] = (True, False), model: str = "squeeze_sam"
) -> dict[bool, "object"]:
    """``model`` (SqueezeSAM FP16 by default) counted once with SME2 on and once off on the emulated target
    (cached)."""
    from pytest_sme2 import Recipe
    from pytest_sme2.measure.runner import Runner
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run.targets import RunSpec

    session = Sme2Session(Settings(target="emulated", cache_dir=cache_dir, session_dir=session_dir))
    session.registry.register_dir(REPO / "benchmarks" / "models")
    try:
        dtype, warmup = MODELS[model]
        exported = session.export(model, Recipe(dtype=dtype))
        profiles = {}
        for sme2 in sides:
            started = time.monotonic()
            profiles[sme2] = Runner(
                session,
                RunSpec(sme2=sme2, runs=1, warmup=warmup, timeout_s=5400.0),
                session.test_dir(f"{model}-sme2-{sme2}"),
            ).profile(exported)
            print(
                f"counted SME2 {'on' if sme2 else 'off'}: {profiles[sme2].instructions_per_inference / 1e6:.1f} M "
                f"instructions ({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
        return profiles
    finally:
        session.close()


class SavedCounts:
    """One counted run's pricing inputs (device_model.PricingInputs) as kept in JSON, with its instruction total:
    ``modelled(device)`` gives what ``Profile.modelled(device)`` gives for the profile it was saved from."""

    def __init__(self, data: dict) -> None:
        from pytest_sme2.errors import UsageError
        from pytest_sme2.profile.device_model import PricingInputs

        try:
            self.inputs = PricingInputs.from_dict(data)
        except UsageError as exc:
            raise SystemExit(str(exc)) from None
        self.data = data

    @classmethod
    def of(cls, profile: "object") -> "SavedCounts":
        return cls(
            {
                **profile.pricing_inputs().to_dict(),
                "instructions_per_inference": float(profile.instructions_per_inference),
            }
        )

    @property
    def instructions_per_inference(self) -> float:
        return self.data["instructions_per_inference"]

    def modelled(self, device: "str | object") -> "object":
        from pytest_sme2.profile.device_model import device_of

        return self.inputs.priced(device_of(device))


def model_of(label: object) -> str:
    """The model a counted run's label names ("fully_connected fp32-xnnpack [emulated ...]" -> fully_connected)."""
    return str(label).split(" ")[0]


def save_counts(profiles: dict, path: Path) -> None:
    """Write the counted sides into ``path``, keeping a side already there that was not counted now (a long count
    done one side per session adds to the same file)."""
    kept = json.loads(path.read_text()) if path.is_file() else {}
    models = {model_of(side.get("label", "")) for side in kept.values()} | {
        model_of(p.label) for p in profiles.values()
    }
    if len(models) > 1:
        raise SystemExit(f"{path} holds counts of another model ({', '.join(sorted(models))}): save into another file")
    kept.update({("on" if sme2 else "off"): SavedCounts.of(p).data for sme2, p in profiles.items()})
    path.write_text(json.dumps(kept) + "\n")


def load_counts(path: Path, model: str | None = None) -> dict:
    """The saved sides of ``path``; with ``model``, refused when they were counted of another model (their labels
    name it: the SqueezeSAM table printed from the layer's counts was nonsense)."""
    data = json.loads(path.read_text())
    counts = {side == "on": SavedCounts(data[side]) for side in ("on", "off") if side in data}
    if model is not None:
        for saved in counts.values():
            counted = model_of(saved.data.get("label", ""))
            if counted != model:
                raise SystemExit(f"{path} holds counts of {counted!r}, not {model!r}: pass --model {counted}")
    return counts


def comparison(profiles: dict, device: "str | object") -> dict:
    """Published and modelled ms (off, on) and speedups, end to end and per category, on a device (a name,
    or a DeviceModel such as a fitted one)."""
    device_name = device if isinstance(device, str) else device.name
    published = PUBLISHED.get(device_name)
    modelled = {key: profiles[sme2].modelled(device) for key, sme2 in (("on", True), ("off", False))}
    rows = {}
    for name in ("E2E", *CATEGORIES):
        row = {}
        for key in ("off", "on"):
            row[f"modelled_{key}_ms"] = modelled[key].e2e_ms if name == "E2E" else modelled[key].category_ms[name]
            if published:
                row[f"published_{key}_ms"] = published[key][name]
        row["modelled_speedup"] = row["modelled_off_ms"] / row["modelled_on_ms"] if row["modelled_on_ms"] else None
        if published:
            on_ms = published["on"][name]
            row["published_speedup"] = published["off"][name] / on_ms if on_ms else None
            if row["modelled_speedup"] is not None and row["published_speedup"]:
                row["speedup_error"] = row["modelled_speedup"] / row["published_speedup"] - 1
            for key in ("off", "on"):
                row[f"published_{key}_share"] = published[key][name] / published[key]["E2E"]
                row[f"modelled_{key}_share"] = row[f"modelled_{key}_ms"] / modelled[key].e2e_ms
        rows[name] = row
    bounds = {key: modelled[key].ops.groupby("bound")["modelled_ms"].sum().round(3).to_dict() for key in modelled}
    return {"device": device_name, "validation": modelled["on"].device.validation, "rows": rows, "bound_ms": bounds}


def fc_comparison(profiles: dict, device: "str | object") -> dict:
    """The fully connected layer: modelled ms and GFLOPS, SME2 off and on, against the published LiteRT rates.

    The published phone is not the device modelled (no shipped device file describes it): its speedup is what
    the comparison can judge; its absolute rates are shown for scale."""
    modelled = {key: profiles[sme2].modelled(device) for key, sme2 in (("on", True), ("off", False))}
    rows = {}
    for key in ("off", "on"):
        linear = modelled[key].ops
        rows[key] = {
            "published_gflops": FC_PUBLISHED_GFLOPS[key],
            "published_ms": FC_FLOP / FC_PUBLISHED_GFLOPS[key] / 1e6,
            "modelled_ms": modelled[key].e2e_ms,
            "modelled_gflops": FC_FLOP / modelled[key].e2e_ms / 1e6,
            "modelled_linear_ms": float(linear.loc[linear["category"] == "GEMM", "modelled_ms"].sum()),
            "bound_ms": linear.groupby("bound")["modelled_ms"].sum().round(4).to_dict(),
        }
    published_x = FC_PUBLISHED_GFLOPS["on"] / FC_PUBLISHED_GFLOPS["off"]
    modelled_x = rows["off"]["modelled_ms"] / rows["on"]["modelled_ms"]
    return {
        "device": modelled["on"].device.name,
        "validation": modelled["on"].device.validation,
        "published_device": FC_PUBLISHED_DEVICE,
        "flop": FC_FLOP,
        "rows": rows,
        "published_speedup": published_x,
        "modelled_speedup": modelled_x,
        "speedup_error": modelled_x / published_x - 1,
    }


def fc_markdown(result: dict) -> str:
    lines = [
        f"Device model `{result['device']}` ({result['validation']}); one fully connected layer 100x640 -> "
        f"1280 fp32, one thread; published on {result['published_device']}.",
        "",
        "| SME2 | published ms | published GFLOPS | modelled ms | modelled GFLOPS | modelled ms by bound |",
        "|---|---|---|---|---|---|",
    ]
    for key in ("off", "on"):
        row = result["rows"][key]
        lines.append(
            f"| {key} | {row['published_ms']:.3f} | {row['published_gflops']:.0f} | {row['modelled_ms']:.3f} "
            f"| {row['modelled_gflops']:.0f} | {row['bound_ms']} |"
        )
    lines += [
        "",
        f"SME2 speedup: published {result['published_speedup']:.2f}x, modelled "
        f"{result['modelled_speedup']:.2f}x, error {result['speedup_error']:+.0%}",
    ]
    return "\n".join(lines)


SCALED_GROUPS = ("sme", "core", "memory")  # what a fit scales: the SME unit's resources, the core's, memory


def resource_groups(base: "object") -> tuple[str, ...]:
    """``--fit-per-resource``'s groups: each of ``base``'s resources on its own, and memory."""
    return (*(r.name for r in base.resources), "memory")


def group_of(resource: str, factors: dict[str, float]) -> str:
    """The factor a resource's rates are scaled by: its own where the fit has one (per resource), else the SME
    unit's (resources named sme_*) or the core's."""
    return resource if resource in factors else ("sme" if resource.startswith("sme_") else "core")


def scaled(base: "object", name: str, factors: dict[str, float], validation: str) -> "object":
    """``base`` (a DeviceModel) with every rate of a group times its factor: SME-unit resources (named sme_*),
    core resources (the others), or each resource by its own name; and memory bandwidths (not the L2 size)."""
    from dataclasses import replace

    resources = tuple(
        replace(r, per_ns={c: v * factors[group_of(r.name, factors)] for c, v in r.per_ns.items()})
        for r in base.resources
    )
    memory = {k: (v if k == "l2_bytes" else v * factors["memory"]) for k, v in base.memory.items()}
    return replace(base, name=name, validation=validation, resources=resources, memory=memory, path="")


def fit(
    profiles: dict, device: str, base: str = "apple-m4", per_resource: bool = False, start: float = 1.0
) -> dict[str, float]:
    """The factors of :func:`fit_landing`."""
    return fit_landing(profiles, device, base, per_resource, start)[0]


def fit_landing(
    profiles: dict, device: str, base: str = "apple-m4", per_resource: bool = False, start: float = 1.0
) -> tuple[dict[str, float], list[float]]:
    """Factors on ``base``'s SME, core and memory rates (``per_resource``: on each resource's and memory's) that
    best reproduce ``device``'s published category times (CONV, GEMM, DATA_MOVEMENT, OTHER, SME2 off and on;
    least squares on log ms), the solver starting with every factor at ``start``. A fit, not a measurement: every
    number it gives is labelled with the data it was fitted on. Seven factors for eight times are not determined:
    where the solver starts (and its version) decides what they price elsewhere (docs/device_model.md). Also the
    singular values of the residuals' Jacobian where it landed, largest first: each near zero is a combination of
    the factors that moves no published time, which the data therefore does not determine."""
    import numpy as np
    from scipy.optimize import least_squares

    from pytest_sme2.profile.device_model import load_device

    published = PUBLISHED[device]
    reference = load_device(base)
    fitted = ("CONV", "GEMM", "DATA_MOVEMENT", "OTHER")
    groups = resource_groups(reference) if per_resource else SCALED_GROUPS

    def residuals(log_factors: "np.ndarray") -> "np.ndarray":
        model = scaled(reference, device, dict(zip(groups, np.exp(log_factors))), "fit")
        out = []
        for key, sme2 in (("on", True), ("off", False)):
            category = profiles[sme2].modelled(model).category_ms
            out += [np.log(category[c] / published[key][c]) for c in fitted]
        return np.array(out)

    result = least_squares(residuals, np.full(len(groups), np.log(start)))
    singular = np.linalg.svd(result.jac, compute_uv=False)  # of the residuals' Jacobian where the solver landed
    return dict(zip(groups, (float(x) for x in np.exp(result.x)))), [float(v) for v in singular]


def device_file(base: "object", factors: dict[str, float], name: str, description: str, fitted_on: str) -> str:
    """The text of a device file whose rates are ``base``'s times the fitted ``factors``, each rate sourced as a
    fit: what it was scaled from, by which factor, fitted on what."""

    def sourced(key: str, value: float, what: str, prefix: str = "") -> list[str]:
        shown = str(int(value)) if float(value).is_integer() and value > 1e5 else f"{value:.6g}"
        return [f"{prefix}{key} = {shown}", f'source.{key} = "fitted: {what} ({fitted_on})"']

    lines = [
        f"# {description}. Fitted by benchmarks/device_model_validation.py --fit; docs/device_model.md.",
        f'name = "{name}"',
        f'description = "{description}"',
        'validation = "fitted to published SqueezeSAM FP16 category times, not independently validated"',
        f"svl_bits = {base.svl_bits}",
        f'source.svl_bits = "assumed equal to {base.name}\'s; no published source found"',
        f"threads = {base.threads}",
        'source.threads = "the fit is of one-thread results"',
    ]
    for resource in base.resources:
        group = group_of(resource.name, factors)
        lines += ["", f"[resources.{resource.name}]", f'what = "{resource.what}"']
        for cls, rate in resource.per_ns.items():
            lines += sourced(
                cls,
                rate * factors[group],
                f"{base.name}'s {rate:.4g} per ns x {group} factor {factors[group]:.4f}",
                "per_ns.",
            )
    lines += ["", "[memory]"]
    for key, value in base.memory.items():
        scaled_value = value if key == "l2_bytes" else value * factors["memory"]
        why = (
            f"{base.name}'s"
            if key == "l2_bytes"
            else f"{base.name}'s {value:.4g} x memory factor {factors['memory']:.4f}"
        )
        lines += sourced(key, scaled_value, why)
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    lines = [
        f"Device model `{result['device']}` ({result['validation']}); SqueezeSAM FP16, one thread.",
        "",
        "| | published off -> on (ms) | modelled off -> on (ms) | published speedup | modelled speedup | "
        "speedup error | share on: published / modelled |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        if "published_off_ms" not in row:
            lines.append(
                f"| {name} | | {row['modelled_off_ms']:.2f} -> {row['modelled_on_ms']:.2f} | | "
                f"{row['modelled_speedup']:.2f}x | | |"
            )
            continue
        error, published_x, modelled_x = row.get("speedup_error"), row["published_speedup"], row["modelled_speedup"]
        lines.append(
            f"| {name} | {row['published_off_ms']:.1f} -> {row['published_on_ms']:.1f} | "
            f"{row['modelled_off_ms']:.2f} -> {row['modelled_on_ms']:.2f} | "
            f"{'n/a' if published_x is None else f'{published_x:.2f}x'} | "
            f"{'n/a' if modelled_x is None else f'{modelled_x:.2f}x'} | {'' if error is None else f'{error:+.0%}'} | "
            f"{row['published_on_share']:.0%} / {row['modelled_on_share']:.0%} |"
        )
    lines += ["", f"Modelled ms by what bounds each operator: {result['bound_ms']}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="apple-m4")
    parser.add_argument(
        "--model",
        choices=tuple(MODELS),
        default="squeeze_sam",
        help="squeeze_sam (FP16, the default) or fully_connected (fp32, the LiteRT layer)",
    )
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".sme2" / "cache")
    parser.add_argument("--session-dir", type=Path, default=REPO / ".sme2" / "device-model-validation")
    parser.add_argument("--json", type=Path, help="also write the comparison as JSON here")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="fit --device's SME, core and memory factors on apple-m4's rates to its published "
        "SqueezeSAM category times, then compare the fitted model (a fit, labelled so)",
    )
    parser.add_argument(
        "--fit-per-resource",
        action="store_true",
        help="with --fit: one factor per resource of apple-m4 and one for memory (7 factors for the 8 "
        "published category times), not three",
    )
    parser.add_argument("--write", type=Path, help="with --fit: write the fitted device file here")
    parser.add_argument(
        "--save-counts",
        type=Path,
        help="write what pricing the counted runs needs as JSON here (re-price later with --counts)",
    )
    parser.add_argument("--counts", type=Path, help="price counts saved by --save-counts instead of counting")
    parser.add_argument(
        "--sides",
        choices=("both", "on", "off"),
        default="both",
        help="count only SME2 on or off (with --save-counts: to save one side of a long count)",
    )
    args = parser.parse_args(argv)
    if args.fit_per_resource and not args.fit:
        parser.error("--fit-per-resource is a kind of --fit: pass both")
    sides = {"both": (True, False), "on": (True,), "off": (False,)}[args.sides]
    profiles = (
        load_counts(args.counts, args.model)
        if args.counts
        else counted_profiles(args.cache_dir, args.session_dir, sides, args.model)
    )
    if args.save_counts:
        save_counts(profiles, args.save_counts)
    if set(profiles) != {True, False}:
        print("one side counted: nothing to compare", file=sys.stderr)
        return 0
    device: object = args.device
    if args.model == "fully_connected":
        if args.fit:
            raise SystemExit("--fit fits SqueezeSAM's published category times; not with --model fully_connected")
        result = fc_comparison(profiles, device)
        print(fc_markdown(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    if args.fit:
        from pytest_sme2.profile.device_model import load_device

        factors = fit(profiles, args.device, per_resource=args.fit_per_resource)
        print(f"fitted on apple-m4's rates: {factors}", file=sys.stderr)
        device = scaled(
            load_device("apple-m4"),
            args.device,
            factors,
            f"fitted to published SqueezeSAM FP16 category times: {factors}",
        )
        if args.write:
            args.write.write_text(
                device_file(
                    load_device("apple-m4"),
                    factors,
                    args.device,
                    f"{args.device}, one thread, fitted on apple-m4's rates",
                    "SqueezeSAM FP16, 1 thread, published per-category ms SME2 off and on",
                )
            )
    result = comparison(profiles, device)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

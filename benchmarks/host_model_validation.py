"""Issue 26, item 3: validate the modelling method where we have hardware, on this x86 host.

The device models price what an emulated run counts. Whether a per-kernel-family throughput model can predict
latency at all is checkable here, on real hardware: profile the bundled models (and the benchmark models) on
the host target, take each operator's work (multiply-accumulates) and bytes from the exported program
(export/work.py), fit per kernel family ``t = macs / rate + bytes / bandwidth + per_call`` (non-negative least
squares, scipy.optimize.nnls) on every model but one, predict the one left out, and report the error per
operator and end to end against its measured median ms. End to end it also fits ``t = instructions / rate``
on callgrind's count of one inference (``--sme2-metric=instructions``), the other predictor issue 26 names.

What differs from the device models (say so wherever this is quoted): x86 has no per-class instruction counts
per operator here (callgrind gives a total per inference), so the operator model's inputs are work and bytes,
not an instruction mix; and its rates are fitted, not measured by microbenchmarks.

    python benchmarks/host_model_validation.py --out benchmarks/results/host_model_<date>.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MODELS, REPO, machine, session  # noqa: E402

from pytest_sme2 import Recipe  # noqa: E402
from pytest_sme2.measure.runner import Runner  # noqa: E402
from pytest_sme2.run.targets import RunSpec  # noqa: E402

RECIPES = (Recipe(), Recipe(dtype="int8"))
EXTRA_MODELS = ("fully_connected",)  # benchmarks/models: a single large linear layer (the FC layer of issue 26)
RUNS, WARMUP = 20, 3


def family(op: str) -> str:
    """An operator's kernel family: its event name without instance numbers (``Convolution (NHWC, F32) IGEMM``)."""
    return op.split(" #")[0]


def collect(root: Path, models: tuple[str, ...], callgrind: bool) -> list[dict]:
    """One row per (model, recipe): measured e2e and per-operator median ms, work and bytes, callgrind count."""
    sess = session(root)
    sess.registry.register_dir(REPO / "benchmarks" / "models")
    rows = []
    for name in models:
        for recipe in RECIPES:
            started = time.perf_counter()
            exported = sess.export(name, recipe)
            profile = Runner(sess, RunSpec(runs=RUNS, warmup=WARMUP), sess.test_dir(f"{name}-{recipe.label}")).profile(
                exported
            )
            ops = profile.ops
            row = {
                "model": name,
                "recipe": recipe.label,
                "e2e_ms": float(profile.median_ms),
                "ops": [
                    {
                        "event": e,
                        "family": family(o),
                        "category": c,
                        "median_ms": float(m),
                        "macs": float(a) if a == a else 0.0,
                        "bytes": float(r + w) if r == r and w == w else 0.0,
                    }
                    for e, o, c, m, a, r, w in zip(
                        ops["event"],
                        ops["op"],
                        ops["category"],
                        ops["median_ms"],
                        ops["macs"],
                        ops["bytes_read"],
                        ops["bytes_written"],
                    )
                ],
            }
            if callgrind:
                from pytest_sme2.run.callgrind import count_instructions

                inputs = exported.inputs_path if exported.inputs_path.is_file() else None
                count = count_instructions(
                    exported.path, inputs, root / f"callgrind-{name}-{recipe.label}", inferences=3, timeout_s=1800
                )
                row["instructions"] = float(count.per_inference)
            row["seconds"] = time.perf_counter() - started
            print(
                f"{name} {recipe.label}: {row['e2e_ms']:.3f} ms, {len(row['ops'])} operators"
                + (f", {row['instructions']:,.0f} instructions" if "instructions" in row else "")
                + f" ({row['seconds']:.0f} s)",
                flush=True,
            )
            rows.append(row)
    sess.close()
    return rows


def _fit(ops: list[dict]) -> np.ndarray:
    """Non-negative [seconds per MAC, seconds per byte, ms per call] for these operators."""
    a = np.array([[o["macs"], o["bytes"], 1.0] for o in ops])
    b = np.array([o["median_ms"] for o in ops])
    scale = np.maximum(a.max(axis=0), 1e-30)  # columns of very different sizes: fit on scaled ones
    x, _ = nnls(a / scale, b)
    return x / scale


def fit(rows: list[dict]) -> dict:
    """Per family, per category (for families not seen) and overall coefficients, and the outside-operator share."""
    ops = [o for r in rows for o in r["ops"]]
    by = lambda key: {k: _fit([o for o in ops if o[key] == k]) for k in {o[key] for o in ops}}  # noqa: E731
    outside = [1 - sum(o["median_ms"] for o in r["ops"]) / r["e2e_ms"] for r in rows if r["e2e_ms"] > 0]
    return {
        "family": by("family"),
        "category": by("category"),
        "all": _fit(ops),
        "outside_share": float(np.median(outside)),
    }


def predict(model: dict, op: dict) -> tuple[float, str]:
    for level, key in (("family", op["family"]), ("category", op["category"])):
        if key in model[level]:
            c = model[level][key]
            return float(c @ [op["macs"], op["bytes"], 1.0]), level
    return float(model["all"] @ [op["macs"], op["bytes"], 1.0]), "all"


def leave_one_model_out(rows: list[dict]) -> dict:
    """Each model predicted by a fit on the others: per-operator and end-to-end errors."""
    per_model, op_errors = [], []
    for name in dict.fromkeys(r["model"] for r in rows):
        train = [r for r in rows if r["model"] != name]
        model = fit(train)
        instr = [(r["instructions"], r["e2e_ms"]) for r in train if "instructions" in r]
        ms_per_instruction = (sum(m for _, m in instr) / sum(i for i, _ in instr)) if instr else None
        for r in (r for r in rows if r["model"] == name):
            predicted = [predict(model, o) for o in r["ops"]]
            ops_ms = sum(p for p, _ in predicted)
            e2e = ops_ms / (1 - model["outside_share"]) if model["outside_share"] < 1 else ops_ms
            for o, (p, level) in zip(r["ops"], predicted):
                if o["median_ms"] > 0:
                    op_errors.append(
                        {
                            "model": name,
                            "recipe": r["recipe"],
                            "event": o["event"],
                            "level": level,
                            "measured_ms": o["median_ms"],
                            "modelled_ms": p,
                            "error": p / o["median_ms"] - 1,
                            "share": o["median_ms"] / r["e2e_ms"] if r["e2e_ms"] > 0 else 0.0,
                        }
                    )
            entry = {
                "model": name,
                "recipe": r["recipe"],
                "measured_ms": r["e2e_ms"],
                "modelled_ms": e2e,
                "error": e2e / r["e2e_ms"] - 1 if r["e2e_ms"] > 0 else None,
            }
            if ms_per_instruction is not None and "instructions" in r:
                callgrind_ms = r["instructions"] * ms_per_instruction
                entry.update(callgrind_ms=callgrind_ms, callgrind_error=callgrind_ms / r["e2e_ms"] - 1)
            per_model.append(entry)
    return {"e2e": per_model, "ops": op_errors}


def summary(result: dict) -> str:
    lines = [
        "| model | recipe | measured ms | modelled ms (work) | error | callgrind-modelled ms | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in result["e2e"]:
        cg = f"{e['callgrind_ms']:.3f} | {e['callgrind_error']:+.0%}" if "callgrind_ms" in e else "- | -"
        lines.append(
            f"| {e['model']} | {e['recipe']} | {e['measured_ms']:.3f} | {e['modelled_ms']:.3f} | "
            f"{e['error']:+.0%} | {cg} |"
        )
    ops = result["ops"]
    weights = np.array([o["share"] for o in ops])
    errors = np.abs([o["error"] for o in ops])
    within = lambda bound: float(weights[errors <= bound].sum() / weights.sum()) if len(ops) else float("nan")  # noqa: E731
    e2e = np.abs([e["error"] for e in result["e2e"]])
    lines += [
        "",
        f"operators: {len(ops)}; by time share, within +-10%: {within(0.10):.0%}, +-25%: {within(0.25):.0%}, "
        f"+-50%: {within(0.50):.0%}; median |error| {float(np.median(errors)):.0%}",
        f"end to end (work model): {int((e2e <= 0.10).sum())} of {len(e2e)} within +-10%, "
        f"{int((e2e <= 0.25).sum())} within +-25%; median |error| {float(np.median(e2e)):.0%}",
    ]
    cg = np.abs([e["callgrind_error"] for e in result["e2e"] if "callgrind_error" in e])
    if len(cg):
        lines.append(
            f"end to end (callgrind instructions): {int((cg <= 0.10).sum())} of {len(cg)} within +-10%, "
            f"{int((cg <= 0.25).sum())} within +-25%; median |error| {float(np.median(cg)):.0%}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-callgrind", action="store_true", help="skip the callgrind count per program")
    parser.add_argument("--models", nargs="*", default=[*MODELS, *EXTRA_MODELS])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="host-model-") as tmp:
        rows = collect(Path(tmp), tuple(args.models), callgrind=not args.no_callgrind)
    result = leave_one_model_out(rows)
    text = summary(result)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"machine": machine(), "runs": RUNS, "warmup": WARMUP, "rows": rows, "validation": result, "summary": text},
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()

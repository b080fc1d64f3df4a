"""benchmarks/device_model_validation.py's fit: a device without microbenchmarks gets factors on a known
device's rates, fitted to published category times. Checked by recovering factors that made the "published"
times here, and by the device file it writes being accepted by the loader with every number sourced."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers_etdump import RunSpec, emulated_metadata, write_counts, write_etdump

from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, InstructionTrace
from pytest_sme2.profile.device_model import load_device
from pytest_sme2.profile.profile import Profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import device_model_validation as validation  # noqa: E402

CONV, GEMM, TRANSPOSE, OTHER = (
    "Convolution (NHWC, PF16) IGEMM #1",
    "Fully Connected (NC, PF16) GEMM #1",
    "Transpose (ND, X16) #1",
    "native_call_native_layer_norm.out",
)


def _profile(tmp_path: Path, sme2: bool) -> Profile:
    """CONV and GEMM on the SME unit with SME2 (widening FMOPA), on NEON without; a transpose (NEON loads and
    stores) and a portable layer norm (scalar) alike in both."""
    tag = "on" if sme2 else "off"
    conv, gemm = (CONV, GEMM) if sme2 else (CONV.replace("PF16", "F16"), GEMM.replace("PF16", "F16"))
    folder = tmp_path / tag
    folder.mkdir()
    run = RunSpec(
        e2e_ns=2_000_000,
        delegate_call_ns=1_500_000,
        delegate_instr=1,
        delegate_ops=[(conv, 500_000), (gemm, 300_000), (TRANSPOSE, 200_000)],
        portable_ops=[(OTHER, 100_000, 150_000, 5)],
    )
    etdump = write_etdump(folder / "timed.etdp", [run])
    heavy = (
        {conv: {"mopa_fp16": 2_000_000}, gemm: {"mopa_fp16": 100_000}}
        if sme2
        else {conv: {"simd_fp": 100_000_000}, gemm: {"simd_fp": 6_000_000}}
    )
    ops = {**heavy, TRANSPOSE: {"load_store_vec": 40_000_000}, OTHER: {"scalar": 50_000_000}}
    total: dict[str, int] = {}
    for counts in ops.values():
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    delegate = {k: v for k, v in total.items() if k != "scalar"}
    write_counts(etdump, {"Method::execute": total, "DELEGATE_CALL": delegate, "OPERATOR_CALL": ops[OTHER], **ops})
    return Profile.from_etdump(
        etdump,
        model="m",
        recipe="fp16-xnnpack",
        variant=f"emulated sme2={tag}",
        metadata=emulated_metadata(sme2),
        instructions=InstructionTrace.from_counts(folder / COUNTS_FILE, etdump, None),
    )


def test_the_fit_recovers_the_factors_that_made_the_published_times(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    profiles = {True: _profile(tmp_path, True), False: _profile(tmp_path, False)}
    truth = {"sme": 0.55, "core": 0.8, "memory": 1.0}  # no operator here has bytes: memory cannot be fitted
    made = validation.scaled(load_device("apple-m4"), "made", truth, "made up")
    published = {
        key: {**profiles[sme2].modelled(made).category_ms, "E2E": profiles[sme2].modelled(made).e2e_ms}
        for key, sme2 in (("on", True), ("off", False))
    }
    monkeypatch.setitem(validation.PUBLISHED, "test-device", published)
    fitted = validation.fit(profiles, "test-device")
    assert fitted["sme"] == pytest.approx(truth["sme"], rel=1e-3)
    assert fitted["core"] == pytest.approx(truth["core"], rel=1e-3)
    text = validation.device_file(
        load_device("apple-m4"), fitted, "test-device", "a fitted test device", "made-up category times"
    )
    (tmp_path / "fitted.toml").write_text(text)
    device = load_device(tmp_path / "fitted.toml")  # every number sourced, every class executed
    assert device.name == "test-device" and "fitted" in device.validation
    sme = next(r for r in device.resources if r.name == "sme_compute")
    assert sme.per_ns["mopa_fp16"] == pytest.approx(1.957 * fitted["sme"], rel=1e-5)
    assert "fitted: apple-m4's" in sme.sources["mopa_fp16"]
    result = validation.comparison(profiles, device)
    assert result["rows"]["E2E"]["speedup_error"] == pytest.approx(0.0, abs=1e-3)


def test_saved_counts_price_exactly_as_the_profile_they_were_saved_from(tmp_path: Path) -> None:
    """--save-counts keeps what pricing needs: re-priced from its JSON (no emulation), every operator's modelled ms,
    each category's and the end to end are the profile's own, on the shipped device and on a scaled one."""

    profiles = {True: _profile(tmp_path, True), False: _profile(tmp_path, False)}
    validation.save_counts({True: profiles[True]}, tmp_path / "counts.json")  # one side per session: they add up
    assert set(validation.load_counts(tmp_path / "counts.json")) == {True}
    validation.save_counts({False: profiles[False]}, tmp_path / "counts.json")
    saved = validation.load_counts(tmp_path / "counts.json")
    assert set(saved) == {True, False}
    scaled = validation.scaled(load_device("apple-m4"), "scaled", {"sme": 0.5, "core": 2.0, "memory": 1.0}, "test")
    for sme2, profile in profiles.items():
        for device in (load_device("apple-m4"), scaled):
            direct, again = profile.modelled(device), saved[sme2].modelled(device)
            assert again.e2e_ms == pytest.approx(direct.e2e_ms, rel=1e-12) and direct.e2e_ms > 0
            assert again.category_ms == pytest.approx(direct.category_ms, rel=1e-12)
            assert list(again.ops["modelled_ms"]) == pytest.approx(list(direct.ops["modelled_ms"]), rel=1e-12)
            assert list(again.ops["identity"]) == list(direct.ops["identity"])
    assert validation.comparison(saved, "apple-m4") == validation.comparison(profiles, "apple-m4")
    data = json.loads((tmp_path / "counts.json").read_text())
    data["on"]["classes"] = data["on"]["classes"][:-1]  # counted by a pytest-sme2 with other classes
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="count again"):
        validation.load_counts(tmp_path / "old.json")


def test_the_kept_squeeze_sam_counts_load_and_hold_the_whole_inference() -> None:
    """benchmarks/results/device_model_2026-11-27/squeeze_sam_counts.json (SqueezeSAM FP16 counted under emulation,
    kept so re-pricing needs no hour of emulation): loads with this pytest-sme2's classes, its operators' classes and
    the instructions outside them add up to the inference it was counted as, and it prices on the shipped device."""
    import numpy as np

    path = Path(validation.REPO, "benchmarks", "results", "device_model_2026-11-27", "squeeze_sam_counts.json")
    saved = validation.load_counts(path)
    assert set(saved) == {True, False}  # SME2 on counted in stop 42, off in stop 43 (40 minutes of emulation)
    # NEON's FP16 FMLAs instead of SME2 outer products: several times the instructions
    assert saved[False].instructions_per_inference > 5 * saved[True].instructions_per_inference
    for counts in saved.values():
        inputs = counts.inputs
        total = float(np.sum(inputs.mix) + np.sum(inputs.outside_mix))
        assert total == pytest.approx(counts.instructions_per_inference, rel=1e-6)
        modelled = counts.modelled("apple-m4")
        assert modelled.e2e_ms > 0 and len(modelled.ops) == len(inputs.ops)
    # stop 40's comparison came from other counts of the same program (the off side counted in stop 39): the kept
    # counts price to the same table, within the 21,940 SVE instructions stop 39's off count still priced apart,
    # with stop 40's memory equation (docs/device_model.md: every byte at DRAM rates once they did not all fit
    # in L2; pricing method 1), written out here, and the apple-m4 numbers of then (kept beside the results)
    from pytest_sme2.profile.device_model import DeviceModel

    then = load_device(
        Path(validation.REPO, "benchmarks", "results", "device_model_2026-11-29", "apple-m4_stop51.toml")
    )

    def step_memory_ns(self, bytes_read, bytes_written):  # noqa: ANN001, ANN202
        read, written = np.nan_to_num(np.asarray(bytes_read, float)), np.nan_to_num(np.asarray(bytes_written, float))
        in_l2 = read + written <= self.memory["l2_bytes"]
        load = np.where(in_l2, self.memory["l2_load_gb_per_s"], self.memory["dram_load_gb_per_s"])
        store = np.where(in_l2, self.memory["l2_store_gb_per_s"], self.memory["dram_store_gb_per_s"])
        return read / load + written / store

    kept = json.loads((path.parent / "squeeze_sam_apple-m4_stop40.json").read_text())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DeviceModel, "memory_ns", step_memory_ns)
        again = validation.comparison(saved, then)
    for category, row in kept["rows"].items():
        for key in ("modelled_off_ms", "modelled_on_ms"):
            assert again["rows"][category][key] == pytest.approx(row[key], rel=1e-4, abs=1e-3), (category, key)
    # today's equation prices the operators over L2 (6 MB) faster, no other: CONV and DATA_MOVEMENT move, alike
    # on both sides (the same NCHW<->NHWC transposes and large convolutions), GEMM and ELEMENTWISE do not
    now = validation.comparison(saved, then)
    for category in ("GEMM", "ELEMENTWISE"):
        assert now["rows"][category]["modelled_on_ms"] == pytest.approx(again["rows"][category]["modelled_on_ms"])
    for category in ("CONV", "DATA_MOVEMENT"):
        faster = [again["rows"][category][k] - now["rows"][category][k] for k in ("modelled_off_ms", "modelled_on_ms")]
        assert faster[0] > 0.1 and faster[0] == pytest.approx(faster[1], rel=1e-2)


def test_apple_m4_says_how_far_the_kept_counts_miss_the_published_m4() -> None:
    """Every modelled number carries apple-m4's validation text; it must be what the kept SqueezeSAM counts priced
    on the shipped file give against the published M4 one-thread results (a rate changed without the text fails
    here), and the text must say "not validated" while any of issue 55's bounds is missed: end-to-end ms within
    25% off and on, speedup within 20%, CONV and GEMM speedups within 25%, shares within 8 points."""
    import re

    path = Path(validation.REPO, "benchmarks", "results", "device_model_2026-11-27", "squeeze_sam_counts.json")
    result = validation.comparison(validation.load_counts(path), "apple-m4")
    rows = result["rows"]
    e2e = rows["E2E"]
    off_error = e2e["modelled_off_ms"] / e2e["published_off_ms"] - 1
    on_error = e2e["modelled_on_ms"] / e2e["published_on_ms"] - 1
    worst_share = max(
        abs(rows[c][f"modelled_{k}_share"] - rows[c][f"published_{k}_share"])
        for c in validation.CATEGORIES
        for k in ("off", "on")
    )
    stated = re.fullmatch(
        r"(not validated|validated): SqueezeSAM FP16 one thread against published M4, ms "
        r"([-+]\d+)% off and ([-+]\d+)% on, speedup ([-+]\d+)%, CONV ([-+]\d+)%, GEMM ([-+]\d+)%, "
        r"shares up to (\d+) points",
        load_device("apple-m4").validation,
    )
    assert stated, load_device("apple-m4").validation
    assert [int(x) for x in stated.groups()[1:]] == [
        round(off_error * 100),
        round(on_error * 100),
        round(e2e["speedup_error"] * 100),
        round(rows["CONV"]["speedup_error"] * 100),
        round(rows["GEMM"]["speedup_error"] * 100),
        round(worst_share * 100),
    ]
    met = (
        abs(off_error) <= 0.25
        and abs(on_error) <= 0.25
        and abs(e2e["speedup_error"]) <= 0.20
        and abs(rows["CONV"]["speedup_error"]) <= 0.25
        and abs(rows["GEMM"]["speedup_error"]) <= 0.25
        and worst_share <= 0.08
    )
    assert stated.group(1) == ("validated" if met else "not validated")


def test_the_fully_connected_comparison_prices_the_kept_counts_as_the_layer_is() -> None:
    """The one-layer comparison (docs/device_model.md): the published rates are the layer's work over its GFLOPS,
    the work is the bundled layer's own shape, and the kept counts price as what the layer is: bound by FP32
    outer products with SME2 and by NEON FMLA without, with as many FMOPAs as the padded blocks need."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "fully_connected", validation.REPO / "benchmarks" / "models" / "fully_connected.py"
    )
    layer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layer)
    linear, (x,) = layer.get_eager_model(), layer.get_example_inputs()
    assert isinstance(linear, torch.nn.Linear)
    assert validation.FC_FLOP == 2 * x.shape[0] * linear.in_features * linear.out_features
    counts = validation.load_counts(
        validation.REPO / "benchmarks" / "results" / "device_model_2026-11-28" / "fully_connected_counts.json"
    )
    result = validation.fc_comparison(counts, "apple-m4")
    off, on = result["rows"]["off"], result["rows"]["on"]
    assert off["published_ms"] == pytest.approx(validation.FC_FLOP / 129e6) and on["published_gflops"] == 429
    assert set(on["bound_ms"]) == {"sme_compute"} and set(off["bound_ms"]) == {"fp_simd"}
    from pytest_sme2.evidence.instruction_classes import NAMES

    mopa = counts[True].inputs.mix[:, NAMES.index("mopa_fp32")].sum()
    rows_padded = -(-x.shape[0] // 32) * 32  # the kernel's blocks of 32 rows at SVL 512
    # one 16 x 16 FP32 tile per FMOPA, over K + 1 steps: KleidiAI packs the bias as one more row of the weights
    assert mopa == (rows_padded // 16) * (linear.out_features // 16) * (linear.in_features + 1)
    assert result["modelled_speedup"] == pytest.approx(off["modelled_ms"] / on["modelled_ms"])
    assert "+350%" in validation.fc_markdown(result)  # the error docs/device_model.md states


def test_a_per_resource_fit_scales_each_resource_by_its_own_factor() -> None:
    """--fit-per-resource: one factor per resource of apple-m4 and one for memory; a resource is scaled by its own
    factor only (the three-group fit scales every sme_* resource by one factor, every other by another)."""
    base = load_device("apple-m4")
    groups = validation.resource_groups(base)
    assert groups[-1] == "memory" and set(groups[:-1]) == {r.name for r in base.resources}
    factors = {name: 1.0 for name in groups} | {"fp_simd": 0.25, "sme_memory": 3.0}
    model = validation.scaled(base, "per-resource", factors, "test")
    for old, new in zip(base.resources, model.resources):
        for cls, rate in old.per_ns.items():
            assert new.per_ns[cls] == pytest.approx(rate * factors[old.name])
    assert model.memory == base.memory
    assert validation.group_of("sme_compute", {"sme": 0.5, "core": 1.0}) == "sme"
    assert validation.group_of("fp_simd", {"sme": 0.5, "core": 1.0}) == "core"


def test_counts_of_one_model_are_not_priced_or_saved_as_another(tmp_path: Path) -> None:
    """A review: `--counts fully_connected_counts.json` without `--model fully_connected` printed the SqueezeSAM
    table from the layer's counts; and a save could merge one model's side into another model's file."""
    kept = validation.REPO / "benchmarks" / "results" / "device_model_2026-11-28" / "fully_connected_counts.json"
    with pytest.raises(
        SystemExit, match="holds counts of 'fully_connected', not 'squeeze_sam': pass --model " "fully_connected"
    ):
        validation.load_counts(kept, "squeeze_sam")
    assert set(validation.load_counts(kept, "fully_connected")) == {True, False}
    profile = _profile(tmp_path, True)  # labelled "m ..."
    copy = tmp_path / "counts.json"
    copy.write_text(kept.read_text())
    with pytest.raises(SystemExit, match="holds counts of another model"):
        validation.save_counts({True: profile}, copy)


def _fc_priced_by_x300_fit(per_resource: bool, start: float = 1.0) -> tuple[dict, list[float]]:
    """The LiteRT fully connected layer priced by a model fitted afresh to the X300's SqueezeSAM times, and the
    singular values of the fit's Jacobian where it landed."""
    from pytest_sme2.profile.device_model import load_device

    results = validation.REPO / "benchmarks" / "results"
    squeeze = validation.load_counts(results / "device_model_2026-11-27" / "squeeze_sam_counts.json", "squeeze_sam")
    factors, singular = validation.fit_landing(squeeze, "dimensity-9500", per_resource=per_resource, start=start)
    fitted = validation.scaled(load_device("apple-m4"), "dimensity-9500", factors, "fit")
    layer = validation.load_counts(
        results / "device_model_2026-11-28" / "fully_connected_counts.json", "fully_connected"
    )
    return validation.fc_comparison(layer, fitted), singular


def test_a_fit_to_the_x300_fails_the_phone_layer_it_was_not_fitted_on() -> None:
    """Why no dimensity-9500 file is shipped (docs/device_model.md): rates fitted to the published vivo X300
    SqueezeSAM category times (three factors: SME unit, core, memory), priced on the published SME2 phone's fully
    connected layer (which the fit never saw), put its NEON side at under a quarter of the published GFLOPS and its
    SME2 speedup at over five times the published one. Fitted afresh from the kept counts: the result files are
    not read back."""
    result, _ = _fc_priced_by_x300_fit(per_resource=False)
    assert result["rows"]["off"]["modelled_gflops"] < validation.FC_PUBLISHED_GFLOPS["off"] / 4
    published_speedup = validation.FC_PUBLISHED_GFLOPS["on"] / validation.FC_PUBLISHED_GFLOPS["off"]
    assert result["modelled_speedup"] > 5 * published_speedup


def test_the_seven_factor_fit_is_not_determined_and_fails_the_phone_layer_wherever_it_lands() -> None:
    """Seven factors (one per resource, and memory) for eight published times: wherever the solver lands, started
    from the M4's rates or from a third of them, at least two combinations of the factors move no published time
    (singular values of the Jacobian under 1e-3 of the largest), so the data does not determine them; where it lands
    depends on the start and on scipy's and numpy's builds (41 and 28 GFLOPS SME2 off in one venv, 27.5 from both
    starts in another). Every landing puts the phone layer's NEON side at under half the published GFLOPS and its
    SME2 speedup at over three times the published one: a fit that predicts nothing else."""
    published_speedup = validation.FC_PUBLISHED_GFLOPS["on"] / validation.FC_PUBLISHED_GFLOPS["off"]
    for start in (1.0, 1 / 3):
        landing, singular = _fc_priced_by_x300_fit(per_resource=True, start=start)
        undetermined = [value for value in singular if value < 1e-3 * singular[0]]
        assert len(undetermined) >= 2, f"from {start}: singular values {singular}: the fit is determined now"
        assert landing["rows"]["off"]["modelled_gflops"] < validation.FC_PUBLISHED_GFLOPS["off"] / 2
        assert landing["modelled_speedup"] > 3 * published_speedup

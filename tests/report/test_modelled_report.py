"""What the reports show of modelled device time (--sme2-device, docs/device_model.md): only beside counted
instructions, only when asked, always named a model with its device file's validation, and never in place of
the exact counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_etdump import RunSpec, emulated_metadata, write_counts, write_etdump

from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, InstructionTrace
from pytest_sme2.profile.profile import Profile
from pytest_sme2.report.entries import build_test_entry
from pytest_sme2.report.html import _comparison_html
from pytest_sme2.report.markdown import _counted_comparison
from pytest_sme2.report.table import summary_rows

CONV, TRANSPOSE = "Convolution (NHWC, PF32) IGEMM #1", "Transpose (ND, X32) #1"


def _counted(tmp_path: Path, sme2: bool, threads: int = 1) -> Profile:
    """One counted emulated run of a convolution and a transpose: with SME2 the convolution is 40 FMOPA and 60
    scalar instructions, without it 20,000 NEON and 60 scalar ones."""
    conv = CONV if sme2 else CONV.replace("PF32", "F32")
    folder = tmp_path / f"run-{sme2}-{threads}"
    folder.mkdir()
    run = RunSpec(
        e2e_ns=1_000_000,
        delegate_call_ns=800_000,
        delegate_instr=1,
        delegate_ops=[(conv, 300_000), (TRANSPOSE, 200_000)],
    )
    etdump = write_etdump(folder / "timed.etdp", [run])
    conv_mix = {"mopa_fp32": 40, "scalar": 60} if sme2 else {"simd_fp": 20_000, "scalar": 60}
    # Method::execute: the two operators and 100 scalar instructions of the delegate call's own
    total = {**conv_mix, "simd_fp": conv_mix.get("simd_fp", 0) + 200, "scalar": conv_mix["scalar"] + 100}
    write_counts(
        etdump, {"Method::execute": total, "DELEGATE_CALL": total, conv: conv_mix, TRANSPOSE: {"simd_fp": 200}}
    )
    return Profile.from_etdump(
        etdump,
        model="m",
        recipe="fp32-xnnpack",
        variant=f"emulated sme2={'on' if sme2 else 'off'} threads={threads}",
        metadata=emulated_metadata(sme2, threads),
        instructions=InstructionTrace.from_counts(folder / COUNTS_FILE, etdump, None),
    )


def test_counted_comparisons_carry_modelled_time_only_when_a_device_is_asked_for(tmp_path: Path) -> None:
    on, off = _counted(tmp_path, True), _counted(tmp_path, False)
    without = build_test_entry("t.py::t", [on, off])
    assert without["comparisons"][0]["modelled"] is None
    assert summary_rows([without])[0][4].startswith("n/a (emulated); ")

    entry = build_test_entry("t.py::t", [on, off], device="apple-m4")
    modelled = entry["comparisons"][0]["modelled"]
    expected_on, expected_off = on.modelled("apple-m4"), off.modelled("apple-m4")
    assert modelled["on_ms"] == expected_on.e2e_ms and modelled["off_ms"] == expected_off.e2e_ms
    assert modelled["speedup"] == pytest.approx(modelled["off_ms"] / modelled["on_ms"]) and modelled["speedup"] > 1
    conv = next(c for c in modelled["categories"] if c["category"] == "CONV")
    assert conv["speedup"] == pytest.approx(conv["off_ms"] / conv["on_ms"])
    assert modelled["slower_with_sme2"] == []
    # the terminal cell: the modelled speedup named as such, the exact instruction ratio kept beside it
    cell = summary_rows([entry])[0][4]
    assert cell.startswith(f"{modelled['speedup']:.2f}x modelled on apple-m4 (not validated); ")
    from pytest_sme2.report.table import modelled_labels

    # the whole label once, under the table (a model author's trial: it made every row 330 columns wide)
    assert modelled_labels([entry]) == [
        f"modelled on apple-m4 ({modelled['validation']}; a model, not a " f"measurement: docs/device_model.md)"
    ]
    assert modelled_labels([without]) == []
    assert cell.endswith("fewer instr")
    from pytest_sme2.report.table import columns

    # its header says what it holds (a model author's trial: "[95% CI]" over a modelled value with no interval)
    assert columns([entry])[4] == "SME2 speedup (modelled; counted)"
    assert columns([without])[4] == "SME2 speedup [95% CI]"
    markdown = "\n".join(_counted_comparison(entry["comparisons"][0]))
    html = _comparison_html(entry["comparisons"][0])
    for text in (markdown, html):
        assert "Modelled on apple-m4" in text and "a model, not a measurement" in text
        assert "modelled off" in text


def test_a_profile_the_model_refuses_is_reported_with_the_reason_and_no_speedup(tmp_path: Path) -> None:
    on, off = _counted(tmp_path, True, threads=4), _counted(tmp_path, False, threads=4)
    entry = build_test_entry("t.py::t", [on, off], device="apple-m4")
    modelled = entry["comparisons"][0]["modelled"]
    assert "speedup" not in modelled and "4 threads" in modelled["refused"]
    assert summary_rows([entry])[0][4].startswith("not modelled on apple-m4 (summary.md says why); ")
    assert "Not modelled on apple-m4: " in "\n".join(_counted_comparison(entry["comparisons"][0]))


def test_an_unknown_device_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--sme2-device", "pixel-99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no device model 'pixel-99'*apple-m4*"])


def test_a_device_file_in_the_ini_is_found_from_the_rootdir_and_a_missing_one_is_named(
    pytester: pytest.Pytester,
) -> None:
    """A model author's trial: ini `sme2_device = devices/ok.toml` failed from a subfolder ("no device model
    'devices/ok.toml'"), and a device path that does not exist was told to "give the path of a device file"."""
    from pytest_sme2.profile.device_model import DEVICES_FOLDER

    (pytester.path / "devices").mkdir()
    (pytester.path / "devices" / "ok.toml").write_text((DEVICES_FOLDER / "apple-m4.toml").read_text())
    pytester.makeini("[pytest]\nsme2_device = devices/ok.toml\n")
    sub = pytester.mkdir("sub")
    (sub / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        pytester.runpytest("test_nothing.py").assert_outcomes(passed=1)
    missing = pytester.runpytest("--sme2-device", "devices/nope.toml")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(
        [
            f"*no device file at {pytester.path / 'devices' / 'nope.toml'} (did you mean "
            f"{pytester.path / 'devices' / 'ok.toml'}?): give the path*"
        ]
    )
    misspelt = pytester.runpytest("--sme2-device", "devices/ok.tml")  # a path with a folder: a file, not a name
    misspelt.stderr.fnmatch_lines(["*no device file at *devices/ok.tml (did you mean *devices/ok.toml?)*"])


def test_advice_to_use_a_device_again_names_it_as_it_was_given(tmp_path: Path) -> None:
    """The skipped modelled verdict advised `--sme2-device my-ok` (the name inside a device file), which then
    failed: it names the file as it was given, a shipped device by its name."""
    from dataclasses import replace

    from pytest_sme2.profile.device_model import DEVICES_FOLDER, load_device

    shipped = load_device("apple-m4")
    assert shipped.option == "apple-m4"
    copy = tmp_path / "ok.toml"
    copy.write_text((DEVICES_FOLDER / "apple-m4.toml").read_text().replace('name = "apple-m4"', 'name = "my-ok"'))
    assert load_device(copy).option == str(copy)
    assert replace(load_device(copy), given="devices/ok.toml").option == "devices/ok.toml"

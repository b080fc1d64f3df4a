"""`pytest-sme2 calibrate` checked here, without an SME2 device: each microbenchmark executes the instructions it
claims, in the amounts it claims (counted by class under qemu, the emulated target's counter), its instruction
words are the assembler's, and a calibration under qemu is labelled as emulator numbers and never written as a
device's."""

from __future__ import annotations

import dataclasses
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.instruction_classes import NAMES
from pytest_sme2.measure import calibrate, microbench
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.native.build import SOURCE_DIR, build_microbench

SOURCE = SOURCE_DIR / "microbench.c"
needs_emulation = pytest.mark.skipif(
    emulation_setup.status().qemu is None or shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="needs the emulated target (pytest-sme2 setup-emulation)",
)
# The C program around the kernels (argument parsing, printing a time whose digits vary) executes a few scalar
# instructions and loads more or fewer from one run to the next; the classes a kernel measures are exact.
PROGRAM_NOISE = 32
ITERATIONS = 1000


@pytest.fixture(scope="module")
def qemu_bench() -> microbench.QemuBench:
    return microbench.QemuBench(emulation_setup.qemu_binary(), build_microbench("linux-aarch64"))


@needs_emulation
def test_every_microbenchmark_executes_what_it_claims_counted_by_class_under_qemu(qemu_bench) -> None:  # noqa: ANN001
    """Two runs of each kernel, N and 2N iterations, counted by the emulated target's counter: the difference is
    N iterations, so it must hold exactly N times each class the kernel claims, and nothing else."""
    found = microbench.kernels(qemu_bench)
    measured = {k.measures for k in found}
    # every class a device file prices is measured by some kernel, but mopa_other (FP64 and 16-bit outer
    # products, which calibrate prices at the slowest outer product it measured) and the core's width
    assert set(NAMES) - measured == {"mopa_other"} and "all" in measured
    for kernel in found:
        size = str(4 * kernel.bytes_per_iteration(512))
        once, twice = (
            microbench.count_classes(qemu_bench.qemu, qemu_bench.binary, ["run", kernel.name, str(n), size, "1", "0"])
            for n in (ITERATIONS, 2 * ITERATIONS)
        )
        difference = {name: twice[name] - once[name] for name in NAMES}
        for name in NAMES:
            claimed = ITERATIONS * kernel.claims.get(name, 0)
            if name in ("scalar", "load_store"):
                assert abs(difference[name] - claimed) <= PROGRAM_NOISE, (kernel.name, name, difference)
            else:
                assert difference[name] == claimed, (kernel.name, name, difference)
        if kernel.measures != "all":  # the class it times, and the two loop instructions when they are scalar too
            loop = 2 if kernel.measures == "scalar" else 0
            assert kernel.claims[kernel.measures] == kernel.count + loop and kernel.count > 0


def _inst_words() -> list[tuple[str, str]]:
    """(word, assembly) of every `.inst` written with its assembly beside it in microbench.c."""
    pairs = re.findall(r'"\.inst 0x([0-9a-f]{8})\\n"\s*/\* ([a-z][^*]*?) \*/', SOURCE.read_text())
    return [(word, re.sub(r"\s*\(.*\)$", "", text)) for word, text in pairs if not text.startswith("...")]


@pytest.mark.skipif(shutil.which("llvm-mc-19") is None, reason="needs LLVM 19's assembler (apt-get install llvm-19)")
def test_the_instruction_words_are_the_assemblers_encodings_of_the_assembly_beside_them() -> None:
    pairs = _inst_words()
    assert len(pairs) >= 40  # every SME, SME2 and SVE instruction the kernels and their setup use
    text = "\n".join(asm for _, asm in pairs) + "\n"
    done = subprocess.run(
        ["llvm-mc-19", "-triple=aarch64", "-mattr=+sme2,+sve2", "-show-encoding"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    encoded = [
        "".join(reversed(re.findall(r"0x([0-9a-f]{2})", line.split("encoding:")[1])))
        for line in done.stdout.splitlines()
        if "encoding:" in line
    ]
    assert encoded == [word for word, _ in pairs]


@needs_emulation
def test_a_calibration_under_qemu_is_labelled_emulator_numbers_and_not_written_as_a_devices(
    qemu_bench, tmp_path: Path
) -> None:  # noqa: ANN001
    from pytest_sme2.profile.device_model import load_device

    result = calibrate.measure(qemu_bench, target_ns=200_000)
    assert result.emulated and result.info.svl_bits == 512
    assert "UNDER QEMU (emulator numbers" in calibrate.table(result)[0]
    with pytest.raises(UsageError, match="an emulator: its times are qemu's, not a device's"):
        calibrate.device_file_text(result, "qemu-emulator")
    path = tmp_path / "qemu-emulator.toml"
    path.write_text(calibrate.device_file_text(result, "qemu-emulator", allow_emulator=True))
    device = load_device(str(path))  # a device file like any other: --sme2-device PATH takes it
    assert device.validation == calibrate.EMULATOR_VALIDATION and device.svl_bits == 512
    sources = [s for r in device.resources for s in r.sources.values()]
    assert sources and all("measured under qemu (an emulator, not a device)" in s for s in sources)
    # every priced class has the measured rate of its kernel (what the file says is what was timed)
    sme = next(r for r in device.resources if r.name == "sme_compute")
    assert sme.per_ns["mopa_fp32"] == pytest.approx(result.rates["mopa_fp32"].per_ns, rel=1e-5)
    assert device.memory["dram_load_gb_per_s"] == pytest.approx(result.rates["sve_load@dram"].gb_per_s, rel=1e-5)


@needs_emulation
def test_a_device_calibration_names_the_device_version_and_date_in_every_source(qemu_bench, tmp_path: Path) -> None:  # noqa: ANN001
    """The file a calibration on a device writes (here qemu's rates standing in for a device's, as a device would
    report them): every source says "measured on <device> by pytest-sme2 calibrate <version>, <date>"."""
    from pytest_sme2._version import __version__
    from pytest_sme2.profile.device_model import load_device

    measured = calibrate.measure(qemu_bench, target_ns=200_000)
    device_run = dataclasses.replace(measured, emulated=False, where="Test Board X1")
    path = tmp_path / "board.toml"
    path.write_text(calibrate.device_file_text(device_run, "test-board"))
    device = load_device(str(path))
    expected = f"measured on Test Board X1 by pytest-sme2 calibrate {__version__}, {measured.date}"
    assert all(s.startswith(expected) for r in device.resources for s in r.sources.values())
    assert "not validated" in device.validation
    with pytest.raises(UsageError, match="--name 'my board'"):
        calibrate.device_file_text(device_run, "my board")


@needs_emulation
def test_the_command_under_emulation_prints_the_rates_and_writes_no_device_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sme2.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(microbench, "TARGET_NS", 200_000)
    assert main(["calibrate", "--sme2-target", "emulated", "--models", "none"]) == 2
    out, err = capsys.readouterr()
    assert "mopa_fp32" in out and "UNDER QEMU (emulator numbers, not a device's)" in out
    assert "no device file written" in err and not list(tmp_path.glob("*.toml"))
    assert main(["calibrate", "--sme2-target", "emulated", "--models", "none", "--allow-emulator-numbers"]) == 0
    assert "use it with --sme2-device qemu-emulator.toml" in capsys.readouterr().out
    assert (tmp_path / "qemu-emulator.toml").is_file()
    assert main(["calibrate", "--sme2-target", "phone"]) == 2
    assert "calibrate measures on local, emulated, adb or adb:SERIAL" in capsys.readouterr().err
    if platform.machine() not in ("aarch64", "arm64"):  # the default, local, on this x86 machine: said so
        assert main(["calibrate"]) == 2
        assert "the microbenchmarks are AArch64 code" in capsys.readouterr().err
    assert main(["calibrate", "--sme2-target", "emulated", "--out", "dev.txt"]) == 2
    assert "a device file's name ends in .toml" in capsys.readouterr().err


@needs_emulation
def test_calibrate_on_a_standin_arm64_phone_writes_its_file_and_prices_a_bundled_model_beside_its_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end through adb: the stand-in phone is an arm64 device whose programs run under qemu with SME2 (its
    times are the emulator's, so no number here is judged, only what is written and printed). The microbenchmarks
    are pushed and run there, the file names the phone, and toy_cnn is measured on the phone with SME2 on and off,
    counted on the emulated target and priced on the new file, with the error printed."""
    from adb_standin import AdbStandin, namespaces_available

    if namespaces_available() is not None:
        pytest.skip(str(namespaces_available()))
    from pytest_sme2.cli import main
    from pytest_sme2.profile.device_model import load_device

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(microbench, "TARGET_NS", 200_000)
    with AdbStandin(tmp_path / "standin") as standin:
        standin.add_device(
            "X300STANDIN",
            sme2=True,
            abi="arm64-v8a",
            model="X300 Standin",
            soc="Dimensity Standin",
            emulator=emulation_setup.qemu_binary(),
        )
        code = main(
            [
                "calibrate",
                "--sme2-target",
                "adb:X300STANDIN",
                "--sme2-adb-server",
                standin.address,
                "--models",
                "toy_cnn",
                "--runs",
                "2",
                "--out",
                "phone.toml",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--model-dir",
                str(Path(__file__).parents[2] / "models"),
            ]
        )
    out, err = capsys.readouterr()
    assert code == 0, err
    device = load_device(str(tmp_path / "phone.toml"))
    assert device.name == "x300-standin-dimensity-standin" and device.svl_bits == 512
    assert all(
        s.startswith("measured on X300 Standin (Dimensity Standin) by pytest-sme2 calibrate")
        for r in device.resources
        for s in r.sources.values()
    )
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("toy_cnn")]
    assert [row[1] for row in rows] == ["on", "off"]
    for row in rows:  # measured ms, modelled ms, error: the error is the two numbers' own
        measured, modelled, error = float(row[2]), float(row[3]), float(row[4].rstrip("%")) / 100
        assert measured > 0 and modelled > 0 and error == pytest.approx(modelled / measured - 1, abs=0.006)


class _NoMeasuring:
    """A bench that fails the test if anything is measured on it."""

    where, emulated = "Test Board X1", False


def _refusing_bench(monkeypatch: pytest.MonkeyPatch, built: list[str]) -> None:
    from pytest_sme2.cli import calibrate as command

    def bench_for(target: str, server: str | None) -> _NoMeasuring:
        built.append(target)
        return _NoMeasuring()

    def measure(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured although the command had to refuse first")

    monkeypatch.setattr(command, "bench_for", bench_for)
    monkeypatch.setattr(calibrate, "measure", measure)


def test_an_invalid_name_is_refused_before_anything_is_built_or_measured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 64 (weak): an invalid --name was refused only after the whole measurement."""
    from pytest_sme2.cli import main

    built: list[str] = []
    _refusing_bench(monkeypatch, built)
    assert main(["calibrate", "--name", "my board"]) == 2
    assert "--name 'my board': a device name is letters, digits" in capsys.readouterr().err and not built


@pytest.mark.parametrize("planted", ["file", "link"])
def test_an_existing_device_file_is_never_overwritten_and_a_link_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], planted: str
) -> None:
    """Issue 64 (weak): calibrate silently overwrote an existing device file, through a link too."""
    from pytest_sme2.cli import main

    monkeypatch.chdir(tmp_path)
    _refusing_bench(monkeypatch, [])
    victim = tmp_path / "victim.toml"
    victim.write_text("mine")
    out = tmp_path / "dev.toml"
    out.write_text("mine") if planted == "file" else out.symlink_to(victim)
    assert main(["calibrate", "--out", "dev.toml"]) == 2
    err = capsys.readouterr().err
    shown = "dev.toml" if planted == "file" else f"dev.toml (a link to {victim})"
    assert f"{shown} already exists; calibrate never overwrites a device file and measured nothing" in err
    assert victim.read_text() == "mine" and out.read_text() == "mine"
    (tmp_path / "test-board-x1.toml").write_text("mine")  # the default name, from the device: refused too
    assert main(["calibrate"]) == 2
    assert "test-board-x1.toml already exists" in capsys.readouterr().err

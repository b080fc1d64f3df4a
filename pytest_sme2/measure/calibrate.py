"""A device file measured on the user's own SME2 device: ``pytest-sme2 calibrate``.

Why: no SME2 phone core's rates are published (docs/device_model.md), and the shipped apple-m4 takes the core's
unit counts from the M1. The microbenchmarks (run/native/microbench.c, timed by microbench.py) give every
instruction class a device file prices its rate on the device itself, and the memory bandwidths at the sizes of
its caches; this module turns them into a device file (docs/device_model.md's format) whose every source says
where and when it was measured, and prices bundled models on it beside their measured latency.

What the rates are: the peak rate of independent instructions of each class on one thread (latency hidden), not
what a compiled kernel achieves; the side-by-side models say how far that is from measured latency.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from pytest_sme2.errors import UsageError
from pytest_sme2.measure.microbench import Bench, DeviceInfo, Rate, device_info, kernels, require_sme2, time_kernel

if TYPE_CHECKING:
    from pytest_sme2.profile.device_model import DeviceModel

# device file resource -> (what it is, the kernels whose measured class it executes)
RESOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sme_compute": (
        "the SME unit's arithmetic: outer products, ZA array-vector operations, streaming SVE, other SME",
        ("mopa_fp32", "mopa_fp16", "mopa_int8", "za_vgx2", "za_vgx4", "sme2_z", "sme_other", "sve_other"),
    ),
    "sme_memory": ("the SME unit's loads and stores of Z and ZA vectors", ("sme_load", "sve_load")),
    "fp_simd": ("the core's FP/SIMD (NEON) pipes", ("simd_fp",)),
    "load_store": ("the core's load units", ("load_store_vec", "load_store")),
    "integer": ("the core's integer units", ("scalar", "sve_predicate")),
    "pipeline": ("the core's width: the widest mix of independent instructions", ("mix",)),
}
L1_FALLBACK = 32 * 1024  # when the device does not say its L1 data cache size
DRAM_BYTES = 64 * 1024 * 1024  # at least this, and 8 x L2: far past any L2 or system cache of a phone or Mac core
EMULATOR_VALIDATION = "emulator numbers: measured under qemu, not a device's; no device time can be read from them"


@dataclass(frozen=True)
class Calibration:
    """What one calibration measured: the device, its vector length and caches, each kernel's rate, the clock."""

    where: str
    emulated: bool
    info: DeviceInfo
    rates: dict[str, Rate]  # kernel name (and sve_load@l2, sve_load@dram, sve_store@...) -> rate
    clock_ghz: float
    version: str
    date: str

    @property
    def l2_bytes(self) -> int:
        return self.info.l2_bytes


def measure(
    bench: Bench,
    l2_bytes: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
    target_ns: int | None = None,
) -> Calibration:
    """Every microbenchmark timed on ``bench``: each class's rate (the load and store kernels in L1), the SVE
    loads and stores at half the L2 size and at DRAM size, and the clock (a chain of one-cycle adds)."""
    from pytest_sme2._version import __version__
    from pytest_sme2.measure import microbench

    info = device_info(bench)
    require_sme2(info, bench.where)
    l2 = l2_bytes or info.l2_bytes
    if not l2:
        raise UsageError(f"{bench.where} does not say its L2 cache size (sysfs or sysctl): give it with --l2-bytes")
    info = DeviceInfo(info.svl_bits, info.sme2, info.l1d_bytes, l2)
    target = target_ns or microbench.TARGET_NS
    found = {k.name: k for k in kernels(bench)}
    rates: dict[str, Rate] = {}
    l1 = (info.l1d_bytes or L1_FALLBACK) // 4
    for kernel in found.values():
        size = l1 if kernel.vectors else 0
        rates[kernel.name] = time_kernel(bench, kernel, info.svl_bits, size, target)
        progress(_line(rates[kernel.name]))
    for name in ("sve_load", "sve_store"):
        for level, size in (("l2", l2 // 2), ("dram", max(DRAM_BYTES, 8 * l2))):
            rate = time_kernel(bench, found[name], info.svl_bits, size, target)
            rates[f"{name}@{level}"] = rate
            progress(_line(rate, level))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return Calibration(bench.where, bench.emulated, info, rates, rates["clock"].per_ns, __version__, date)


def _line(rate: Rate, level: str = "") -> str:
    size = f" {rate.buffer_bytes / 1024:.0f} KiB{f' ({level})' if level else ''}" if rate.buffer_bytes else ""
    moved = f", {rate.gb_per_s:.1f} GB/s" if rate.gb_per_s else ""
    return f"  {rate.kernel:<15} {rate.measures:<15} {rate.per_ns:10.4g} per ns{moved}{size}"


def measured_by(calibration: Calibration) -> str:
    """The words every source of the written file carries."""
    kind = "under qemu (an emulator, not a device)" if calibration.emulated else "on"
    return f"measured {kind} {calibration.where} by pytest-sme2 calibrate {calibration.version}, " f"{calibration.date}"


def check_device_name(name: str) -> str:
    """``name`` when it can name a device in every label; a UsageError otherwise (the command asks before it
    measures: an invalid --name was refused only after the whole measurement)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UsageError(
            f"--name {name!r}: a device name is letters, digits and . _ - (it names the device in every " f"label)"
        )
    return name


def device_file_text(calibration: Calibration, name: str, allow_emulator: bool = False) -> str:
    """The device file of a calibration (docs/device_model.md's format): every rate per ns as measured, every
    source saying where and when. Refused for emulator numbers unless ``allow_emulator``, and then labelled so."""
    if calibration.emulated and not allow_emulator:
        raise UsageError(
            f"{calibration.where} is an emulator: its times are qemu's, not a device's, and are not "
            f"written as a device file; run calibrate on the SME2 device (--sme2-target local or adb), "
            f"or pass --allow-emulator-numbers to write them labelled as emulator numbers"
        )
    check_device_name(name)
    by = measured_by(calibration)
    rates, info = calibration.rates, calibration.info
    validation = (
        EMULATOR_VALIDATION
        if calibration.emulated
        else (
            f"measured peak rates of independent instructions on {calibration.where}, {calibration.date}; "
            f"not validated "
            f"against measured model latency (calibrate prints the side-by-side errors)"
        )
    )
    lines = [
        f"# {name}: measured by pytest-sme2 calibrate (docs/device_model.md). Rates are the peak of independent",
        "# instructions of each class on one thread, not what compiled kernels achieve.",
        f'name = "{name}"',
        f'description = "{_text(calibration.where)}, one thread, SVL {info.svl_bits}"',
        f'validation = "{_text(validation)}"',
        f"svl_bits = {info.svl_bits}",
        f'source.svl_bits = "{_text(by)}: RDSVL"',
        "threads = 1",
        f'source.threads = "{_text(by)}: one thread"',
        f"clock_ghz = {calibration.clock_ghz:.4g}",
        f'source.clock_ghz = "{_text(by)}: dependent one-cycle adds, {calibration.clock_ghz:.4g} per ns"',
    ]
    classes_of = {"sme_load": ("sme_load_store",), "sve_load": ("sve_load_store",), "mix": ("all",)}
    for resource, (what, names) in RESOURCES.items():
        lines += ["", f"[resources.{resource}]", f'what = "{what}"']
        for kernel in names:
            rate = rates[kernel]
            for cls in classes_of.get(kernel, (rate.measures,)):
                detail = f"{rate.kernel} kernel, {rate.per_ns:.4g} per ns"
                if rate.buffer_bytes:
                    detail += f" over {rate.buffer_bytes} bytes (L1)"
                lines += [f"per_ns.{cls} = {rate.per_ns:.6g}", f'source.{cls} = "{_text(by)}: {detail}"']
        if resource == "sme_compute":  # the outer products calibrate does not run: FP64, 16-bit into 32/64-bit
            slowest = min(rates[k].per_ns for k in ("mopa_fp32", "mopa_fp16", "mopa_int8"))
            lines += [
                f"per_ns.mopa_other = {slowest:.6g}",
                f'source.mopa_other = "{_text(by)}: not run (FP64, 16-bit outer products); the slowest '
                f'outer product measured"',
            ]
    memory = {
        "l2_bytes": (str(info.l2_bytes), "the L2 data cache size the device reports"),
        "l2_load_gb_per_s": _bandwidth(rates["sve_load@l2"]),
        "l2_store_gb_per_s": _bandwidth(rates["sve_store@l2"]),
        "dram_load_gb_per_s": _bandwidth(rates["sve_load@dram"]),
        "dram_store_gb_per_s": _bandwidth(rates["sve_store@dram"]),
    }
    lines += ["", "[memory]"]
    for key, (value, how) in memory.items():
        lines += [f"{key} = {value}", f'source.{key} = "{_text(by)}: {how}"']
    return "\n".join(lines) + "\n"


def _bandwidth(rate: Rate) -> tuple[str, str]:
    kind = "loads" if "load" in rate.kernel else "stores"
    return f"{rate.gb_per_s:.6g}", f"SVE {kind} of one vector over {rate.buffer_bytes} bytes, {rate.gb_per_s:.4g} GB/s"


def _text(value: str) -> str:
    """One line of printable text for a TOML string (the device file refuses control characters)."""
    return re.sub(r"[\x00-\x1f\x7f\"\\]", " ", value)


def table(calibration: Calibration) -> list[str]:
    """The measured rates as the terminal shows them, labelled when an emulator measured them."""
    how = "UNDER QEMU (emulator numbers, not a device's)" if calibration.emulated else "on"
    head = (
        f"measured {how} {calibration.where}: SVL {calibration.info.svl_bits}, L2 {calibration.l2_bytes} bytes, "
        f"clock {calibration.clock_ghz:.3g} GHz"
    )
    return [head, *(_line(rate, name.partition("@")[2]) for name, rate in calibration.rates.items())]


@dataclass(frozen=True)
class ModelRow:
    """One bundled model, SME2 on or off: measured on the device against modelled on the calibrated file."""

    model: str
    sme2: bool
    measured_ms: float
    modelled_ms: float

    @property
    def error(self) -> float:
        return self.modelled_ms / self.measured_ms - 1


@dataclass(frozen=True)
class ModelSessions:
    """Where model_rows measures and counts: the ``target`` (and its adb server, for the adb target), the export
    cache, the folder its two sessions (measured, counted) write under, and the folder the models are found in."""

    target: str
    cache_dir: Path
    session_dir: Path
    adb_server: str | None = None
    model_dir: Path = Path("models")


def model_rows(device: "DeviceModel", models: list[str], where: ModelSessions, runs: int = 20) -> list[ModelRow]:
    """Each of ``models`` (registered from ``where.model_dir``, fp32: the repository's bundled ones) measured on
    ``where.target`` with SME2 on and off, and counted on the emulated target and priced on ``device`` (a
    DeviceModel): the modelled number beside the measured one."""
    from pytest_sme2.export.export import Recipe
    from pytest_sme2.measure.runner import Runner
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run.targets import RunSpec
    from pytest_sme2.run.targets.adb import is_adb_target
    from pytest_sme2.run.targets.adb.options import SERVER

    target, cache_dir, session_dir, model_dir = where.target, where.cache_dir, where.session_dir, where.model_dir
    rows = []
    # the adb target reads its server from the session's target options (run/targets/adb/options.py)
    given = {SERVER.name: where.adb_server} if where.adb_server is not None and is_adb_target(target) else {}
    measured_session = Sme2Session(
        Settings(target=target, cache_dir=cache_dir, session_dir=session_dir / "measured", target_options=given)
    )
    counted_session = Sme2Session(Settings(target="emulated", cache_dir=cache_dir, session_dir=session_dir / "counted"))
    try:
        if not model_dir.is_dir():
            raise UsageError(
                f"no model folder {model_dir.absolute()} to find {', '.join(models)} in: run calibrate in "
                f"a checkout of pytest-sme2 (its models/ folder), give --model-dir, or --models none"
            )
        for session in (measured_session, counted_session):
            session.registry.register_dir(model_dir)
        for model in models:
            for sme2 in (True, False):
                side = f"{model}-sme2-{'on' if sme2 else 'off'}"
                exported = measured_session.export(model, Recipe(dtype="fp32"))
                measured = Runner(
                    measured_session, RunSpec(sme2=sme2, runs=runs), measured_session.test_dir(side)
                ).profile(exported)
                counted_export = counted_session.export(model, Recipe(dtype="fp32"))
                counted = Runner(
                    counted_session, RunSpec(sme2=sme2, runs=1, warmup=1), counted_session.test_dir(side)
                ).profile(counted_export)
                rows.append(ModelRow(model, sme2, float(measured.median_ms), counted.modelled(device).e2e_ms))
    finally:
        measured_session.close()
        counted_session.close()
    return rows


def model_lines(rows: list[ModelRow], device_name: str) -> list[str]:
    lines = [
        f"bundled models, one thread: measured median against modelled on {device_name}",
        f"  {'model':<22} {'SME2':<4} {'measured ms':>12} {'modelled ms':>12} {'error':>7}",
    ]
    for row in rows:
        lines.append(
            f"  {row.model:<22} {'on' if row.sme2 else 'off':<4} {row.measured_ms:12.4f} "
            f"{row.modelled_ms:12.4f} {row.error:+7.0%}"
        )
    return lines

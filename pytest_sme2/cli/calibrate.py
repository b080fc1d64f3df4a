"""``pytest-sme2 calibrate``: measure a device file on the user's own SME2 device (measure/calibrate.py).

Why a command and not a test option: calibration runs once per device, on the device (an SME2 Mac or Arm Linux
board as the local target, a phone through adb), and its product is a file that ``--sme2-device PATH`` then uses
on any machine, x86 CI included.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.errors import UsageError
from pytest_sme2.system.safe_files import write_file

if TYPE_CHECKING:
    from pytest_sme2.measure.microbench import Bench

TARGETS = "local, emulated, adb or adb:SERIAL"
DEFAULT_MODELS = "mlp,toy_cnn"


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser(
        "calibrate",
        help="measure a device file on an SME2 device: microbenchmarks of every instruction class it "
        "prices, then bundled models measured and modelled side by side",
    )
    parser.add_argument(
        "--sme2-target",
        default="local",
        help=f"where to measure: {TARGETS} (default local: this machine, an SME2 Mac or Arm Linux "
        f"board; emulated measures qemu, whose numbers are never a device's)",
    )
    parser.add_argument("--out", help="write the device file here (default: <name>.toml)")
    parser.add_argument("--name", help="the device's name in every label (default: from the device)")
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help=f"bundled models to measure and model side by side, comma-separated (default "
        f"{DEFAULT_MODELS}; 'none' to skip: their counting needs the emulated target here)",
    )
    parser.add_argument(
        "--model-dir",
        default="models",
        help="the folder the --models are registered from (default models: the repository's bundled "
        "ones, as its sme2_model_dirs)",
    )
    parser.add_argument("--runs", type=int, default=20, help="measured runs per model and side (default 20)")
    parser.add_argument("--l2-bytes", type=int, help="the L2 size when the device does not report it")
    parser.add_argument("--sme2-adb-server", help="the adb server as HOST:PORT")
    parser.add_argument("--cache-dir", default=".sme2/cache", help="export cache (default .sme2/cache)")
    parser.add_argument(
        "--allow-emulator-numbers",
        action="store_true",
        help="with --sme2-target emulated: write the file anyway, labelled as emulator numbers",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the device file at --out (default: refuse an existing one)"
    )
    parser.set_defaults(handler=run)


def bench_for(target: str, adb_server: str | None) -> "Bench":
    """Where the microbenchmarks run for ``target``, built (and pushed) for it."""
    from pytest_sme2.measure import microbench
    from pytest_sme2.run.native.build import build_microbench

    if target == "local":
        system, machine = platform.system(), platform.machine()
        where = f"{_local_cpu()} ({system} {machine})"
        return microbench.LocalBench(build_microbench("host"), where)
    if target == "emulated":
        from pytest_sme2.run import emulation_setup

        state = emulation_setup.status()
        if state.qemu is None or state.problem and "runner" not in state.problem:
            raise UsageError(f"the emulated target is not ready: {state.problem}")
        return microbench.QemuBench(
            state.qemu,
            build_microbench("linux-aarch64"),
            where=f"qemu-aarch64 {state.version} -cpu max (SVL 512) on {platform.node()}",
        )
    from pytest_sme2.run.targets.adb import adb_server_address, is_adb_target, parse_adb_target

    if not is_adb_target(target):
        raise UsageError(f"--sme2-target {target!r}: calibrate measures on {TARGETS}")
    import adbutils

    host, port = adb_server_address(adb_server)
    client = adbutils.AdbClient(host=host, port=port, socket_timeout=60)
    serial = parse_adb_target(target)
    try:
        device = client.device(serial) if serial else client.device()
        model = device.shell("getprop ro.product.model").strip()
        soc = device.shell("getprop ro.soc.model").strip()
    except (adbutils.AdbError, OSError) as exc:
        raise UsageError(f"no adb device for --sme2-target {target} at {host}:{port}: {exc}") from None
    remote = "/data/local/tmp/pytest-sme2-microbench"
    device.sync.push(build_microbench("linux-aarch64"), remote, mode=0o755)
    return microbench.AdbBench(device, remote, f"{model or device.serial}{f' ({soc})' if soc else ''}")


def _local_cpu() -> str:
    import subprocess

    if platform.system() == "Darwin":
        done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True)
        return done.stdout.strip() or "this Mac"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.node()


def run(args: argparse.Namespace) -> int:
    from pytest_sme2.measure import calibrate
    from pytest_sme2.profile.device_model import load_device

    if args.out and not args.out.endswith(".toml"):
        raise UsageError(
            f"--out {args.out!r}: a device file's name ends in .toml (--sme2-device tells a file from a "
            f"shipped name by it)"
        )
    if args.name:
        calibrate.check_device_name(args.name)  # before any build or measurement
    bench = bench_for(args.sme2_target, args.sme2_adb_server)
    planned = Path(args.out or f"{args.name or ('qemu-emulator' if bench.emulated else _slug(bench.where))}.toml")
    _refuse_existing(planned, args.force)
    kind = "qemu, an emulator: its times are not a device's" if bench.emulated else "one thread"
    print(f"calibrating {bench.where}: {kind}")
    result = calibrate.measure(bench, args.l2_bytes, progress=lambda line: print(line, flush=True))
    for line in calibrate.table(result)[:1]:
        print(line)
    name = args.name or ("qemu-emulator" if result.emulated else _slug(result.where))
    if result.emulated and not args.allow_emulator_numbers:
        print(
            "pytest-sme2 calibrate: measured under qemu: these are emulator numbers, not a device's; no device "
            "file written (run on the SME2 device, or pass --allow-emulator-numbers to write them labelled so)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out or f"{name}.toml")
    _refuse_existing(out, args.force)
    write_file(out, calibrate.device_file_text(result, name, args.allow_emulator_numbers))  # never through a link
    device = load_device(str(out))  # the written file must load as any other device file
    print(f"wrote {out} ({device.label}); use it with --sme2-device {out}")
    models = [m for m in args.models.split(",") if m and m != "none"]
    if models:
        if result.emulated:
            print("bundled models not compared: measured and counted would both be qemu's")
            return 0
        where = calibrate.ModelSessions(
            args.sme2_target,
            Path(args.cache_dir),
            Path(".sme2") / "calibrate",
            args.sme2_adb_server,
            Path(args.model_dir),
        )
        rows = calibrate.model_rows(device, models, where, args.runs)
        for line in calibrate.model_lines(rows, device.name):
            print(line)
    return 0


def _refuse_existing(out: Path, force: bool) -> None:
    """UsageError before the measurement when ``out`` is already there (a file, or a link: named with where it
    leads) and ``force`` is not given: calibrate silently overwrote a device file, through a link too."""
    if force or not os.path.lexists(out):
        return
    shown = f"{out} (a link to {os.path.realpath(out)})" if out.is_symlink() else str(out)
    raise UsageError(
        f"{shown} already exists; calibrate never overwrites a device file and measured nothing: pass --out a new "
        "path, or --force to replace it (a link there is replaced, never written through)"
    )


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower()[:60] or "my-device"

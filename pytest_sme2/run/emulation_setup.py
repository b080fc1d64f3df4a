"""Set up and check SME2 emulation: qemu-user 11.1 + the aarch64 runner.

qemu-user 11.1 implements FEAT_SME2 for linux-user (7.2 and 10.0 have SME1
only). Debian ships it in trixie-backports and sid; we fetch it without root
and without touching the system's apt sources: a scratch apt configuration
(its own sources.list, lists and cache under our cache folder), the mirror
taken from the system's own Debian source entry, ``apt-get download`` and
``dpkg-deb -x``. The package is static, so only ``qemu-aarch64`` is kept.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import RunnerError
from pytest_sme2.run import qemu_source_build
from pytest_sme2.run.debian_archive import apt_options, debian_mirror
from pytest_sme2.run.native.build import (
    CROSS_PACKAGE,
    RunnerUnavailable,
    _run,
    build_runner,
    cache_root,
    runner_binary,
    runtime_problem,
)
from pytest_sme2.system.locks import locked

SETUP_COMMAND = "pytest-sme2 setup-emulation"
QEMU_SERIES = "11.1"
QEMU_SUITES = ("trixie-backports", "sid")
SYSROOT = Path("/usr/aarch64-linux-gnu")
DEFAULT_SVL_BITS = 512  # like the Apple M4
CROSS_COMPILER_ADVICE = f"install Debian's aarch64 cross compiler: sudo apt-get install {CROSS_PACKAGE}"
_PROBE_SOURCE = r"""
#include <stdio.h>
#include <sys/auxv.h>
int main(void) {
  unsigned long hwcap2 = getauxval(AT_HWCAP2);
  printf("sme=%d sme2=%d\n", (int)((hwcap2 >> 23) & 1), (int)((hwcap2 >> 37) & 1));
  return 0;
}
"""


def qemu_dir() -> Path:
    return cache_root() / "qemu"


def qemu_binary() -> Path:
    return qemu_dir() / "qemu-aarch64"


def fetch_qemu(force: bool = False) -> Path:
    """Download qemu-user 11.1.x from Debian into the cache; return the qemu-aarch64 path."""
    target = qemu_binary()
    with locked(cache_root() / "qemu.lock"):
        if target.exists() and not force:
            return target
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            raise RunnerError(
                f"fetching qemu-user {QEMU_SERIES} needs apt-get and dpkg-deb (Debian/Ubuntu); elsewhere install a "
                f"qemu-aarch64 >= {QEMU_SERIES} and copy it to {target}"
            )
        mirror = debian_mirror()
        qemu_dir().mkdir(parents=True, exist_ok=True)
        log = qemu_dir() / "setup.log"
        with tempfile.TemporaryDirectory(dir=qemu_dir()) as scratch:
            root = Path(scratch)
            for sub in ("lists/partial", "cache/archives/partial", "download", "extract"):
                (root / sub).mkdir(parents=True)
            keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
            signed = f"[signed-by={keyring}] " if Path(keyring).exists() else ""
            (root / "sources.list").write_text("".join(f"deb {signed}{mirror} {suite} main\n" for suite in QEMU_SUITES))
            options = apt_options(root)
            _run(["apt-get", *options, "update", "-qq"], log, "apt-get update (scratch configuration)")
            policy = subprocess.run(
                ["apt-cache", *options, "madison", "qemu-user"], capture_output=True, text=True
            ).stdout
            versions = [line.split("|")[1].strip() for line in policy.splitlines() if "|" in line]
            wanted = [v for v in versions if re.match(rf"^(\d+:)?{re.escape(QEMU_SERIES)}\.", v)]
            if not wanted:
                raise RunnerError(
                    f"Debian's {', '.join(QEMU_SUITES)} at {mirror} offer no qemu-user {QEMU_SERIES}.x "
                    f"(found: {', '.join(versions) or 'none'}); see {log}"
                )
            with open(log, "ab") as out:
                result = subprocess.run(
                    ["apt-get", *options, "download", f"qemu-user={wanted[0]}"],
                    cwd=root / "download",
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            debs = list((root / "download").glob("qemu-user_*.deb"))
            if result.returncode != 0 or not debs:
                raise RunnerError(f"apt-get download qemu-user={wanted[0]} failed; see {log}")
            _run(["dpkg-deb", "-x", str(debs[0]), str(root / "extract")], log, "unpacking qemu-user")
            staging = target.with_suffix(".tmp")
            shutil.copy2(root / "extract" / "usr" / "bin" / "qemu-aarch64", staging)
            os.replace(staging, target)
    return target


def install_cross_compiler() -> str | None:
    """Install g++-aarch64-linux-gnu with apt as root; otherwise return the advice to do so."""
    if shutil.which("aarch64-linux-gnu-g++") and SYSROOT.exists():
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", CROSS_PACKAGE], env=env)
        if done.returncode == 0:
            return None
    return CROSS_COMPILER_ADVICE


def _probe_binary() -> Path:
    probe = qemu_dir() / "hwcap_probe"
    if not probe.exists():
        compiler = shutil.which("aarch64-linux-gnu-gcc")
        if compiler is None:
            raise RunnerError(f"building the SME2 probe needs aarch64-linux-gnu-gcc; {CROSS_COMPILER_ADVICE}")
        source = probe.with_suffix(".c")
        probe.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(_PROBE_SOURCE)
        _run([compiler, "-O2", "-o", str(probe), str(source)], probe.parent / "setup.log", "building the SME2 probe")
    return probe


@dataclass(frozen=True)
class EmulationStatus:
    qemu: Path | None  # what runs the guest: the plugin-capable build when there is one, else qemu-user 11.1
    version: str | None
    runner: Path | None
    problem: str | None  # None: ready
    plugin_header: Path | None = None  # the qemu-plugin.h of ``qemu`` when it loads plugins
    log_qemu: Path | None = None  # qemu-user 11.1 (static, no plugins): counting from its execution log

    @property
    def counting(self) -> str:
        """Where counted runs count by default: "plugin" (inside the emulator) or "log" (its execution log)."""
        return "plugin" if self.plugin_header is not None else "log"

    def counting_note(self) -> str:
        """Which way counted runs count here, and why (doctor's line)."""
        if self.plugin_header is not None:
            return f"counting in the emulator (pytest-sme2's TCG plugin on qemu {self.version} built with plugins)"
        note = qemu_source_build.unavailable_note()
        why = (
            note.read_text(errors="replace").strip()[:300]
            if note.is_file()
            else f"no plugin-capable qemu at {qemu_source_build.plugin_qemu()}"
        )
        return (
            f"counting from qemu's execution log (2-3x slower than plain emulation): {why}; "
            f"`{SETUP_COMMAND}` builds qemu {qemu_source_build.SOURCE_VERSION} with plugins"
        )

    @property
    def ready(self) -> bool:
        return self.problem is None


def svl_cpu(svl_bits: int) -> str:
    return f"max,sme-default-vector-length={svl_bits // 8}"


def status(build: bool = False, runner: Path | None = None) -> EmulationStatus:
    """Is the emulated target ready? ``problem`` names what is missing and the setup command.

    ``runner``: a user's aarch64 runner instead of the one ``setup-emulation`` builds.
    """
    log_qemu = qemu_binary() if qemu_binary().exists() else None
    header = qemu_source_build.plugin_header()
    plugins = qemu_source_build.plugin_qemu().exists() and header.exists()
    qemu = qemu_source_build.plugin_qemu() if plugins else qemu_binary()
    if not qemu.exists():
        return EmulationStatus(None, None, None, f"qemu-user {QEMU_SERIES} is not set up; run `{SETUP_COMMAND}`")
    extra = {"plugin_header": header if plugins else None, "log_qemu": log_qemu}
    try:
        first = subprocess.run([str(qemu), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EmulationStatus(qemu, None, None, f"{qemu} does not run ({exc}); run `{SETUP_COMMAND} --force`", **extra)
    match = re.search(r"version (\d+)\.(\d+)", first)
    version = f"{match.group(1)}.{match.group(2)}" if match else None
    lowest = qemu_source_build.LOWEST_WITH_SME2 if plugins else (11, 1)  # the source build is 10.2 with SME2
    if match is None or (int(match.group(1)), int(match.group(2))) < lowest:
        return EmulationStatus(
            qemu,
            version,
            None,
            f"{qemu} is qemu {version or '?'}, which has no SME2 for linux-user; " f"run `{SETUP_COMMAND} --force`",
            **extra,
        )
    if not SYSROOT.exists():
        return EmulationStatus(
            qemu,
            version,
            None,
            f"the aarch64 sysroot {SYSROOT} is missing; run `{SETUP_COMMAND}` as root " f"or {CROSS_COMPILER_ADVICE}",
            **extra,
        )
    unavailable = runtime_problem() if runner is None else None
    if unavailable:
        return EmulationStatus(qemu, version, None, unavailable, **extra)
    try:
        if runner is None:
            runner = build_runner("linux-aarch64") if build else _cached_aarch64_runner()
        probe = subprocess.run(
            [str(qemu), "-cpu", "max", str(_probe_binary())],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "QEMU_LD_PREFIX": str(SYSROOT)},
        ).stdout
    except RunnerUnavailable as exc:
        return EmulationStatus(qemu, version, None, f"{exc}", **extra)
    except (RunnerError, OSError, subprocess.TimeoutExpired) as exc:
        return EmulationStatus(qemu, version, None, f"{exc}; run `{SETUP_COMMAND}`", **extra)
    if runner is None:
        return EmulationStatus(qemu, version, None, f"the aarch64 runner is not built; run `{SETUP_COMMAND}`", **extra)
    if "sme2=1" not in probe:
        return EmulationStatus(qemu, version, runner, f"{qemu} -cpu max reports no SME2 ({probe.strip()!r})", **extra)
    return EmulationStatus(qemu, version, runner, None, **extra)


def runner_version(qemu: Path, runner: Path) -> str | None:
    """The executorch version an aarch64 runner was built against (None: not a pytest-sme2 runner)."""
    try:
        answer = subprocess.run(
            [str(qemu), str(runner), "--version"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "QEMU_LD_PREFIX": str(SYSROOT)},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"pytest-sme2 runner executorch=(\S+)", answer.stdout)
    return match.group(1) if match else None


def _cached_aarch64_runner() -> Path | None:
    binary = runner_binary("linux-aarch64")
    return binary if binary.exists() else None


def setup(force: bool = False) -> EmulationStatus:
    """The one setup command: qemu built with plugins from Debian's source package (counting inside the emulator;
    where it cannot be built, the reason is kept and counting reads qemu's log), qemu-user 11.1 (the log path,
    and the emulator where no build is possible), cross compiler (as root), aarch64 wheel and runner."""
    fetch_qemu(force=force)
    try:
        qemu_source_build.build_plugin_qemu(force=force)
    except RunnerError as exc:
        print(f"note: qemu with plugins was not built ({exc}); counted runs read qemu-user {QEMU_SERIES}'s log")
    advice = install_cross_compiler()
    if advice:
        return EmulationStatus(qemu_binary(), None, None, advice)
    build_runner("linux-aarch64", force=force)
    return status()

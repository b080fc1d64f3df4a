"""What CPU is this, and does it have SME2?

Read from the same places XNNPACK's cpuinfo reads: the kernel's hwcap
features in /proc/cpuinfo on Linux/Android, the ``hw.optional.arm.FEAT_SME2``
sysctl on macOS.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class CpuInfo:
    name: str
    arch: str
    system: str
    features: frozenset[str]

    @property
    def has_sme2(self) -> bool:
        return "sme2" in self.features

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "unknown-cpu"


@dataclass(frozen=True)
class Machine:
    """Where native programs run: this computer by default.

    ``launcher`` and ``env`` start a program there (empty for this computer; the
    project's tests use ``qemu-aarch64 -cpu max`` to be an SME2 Linux machine),
    ``runner_arch`` is the ``build_runner`` architecture whose binaries run there.
    """

    cpu: CpuInfo
    runner_arch: str = "host"
    launcher: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def parse_proc_cpuinfo(text: str, arch: str) -> tuple[str, frozenset[str]]:
    """CPU name and feature flags from /proc/cpuinfo text (x86 or Arm layout)."""
    name = ""
    features: set[str] = set()
    implementer = part = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key in ("model name", "hardware", "processor") and not name and not value.isdigit():
            name = value
        elif key in ("flags", "features"):
            features.update(value.split())
        elif key == "cpu implementer":
            implementer = value
        elif key == "cpu part":
            part = value
    if not name and implementer:
        name = f"Arm implementer {implementer} part {part}"
    return name or arch, frozenset(features)


@functools.lru_cache(maxsize=1)
def host_cpu() -> CpuInfo:
    system = platform.system()
    arch = platform.machine()
    if system == "Darwin":

        def sysctl(key: str) -> str:
            try:
                return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
            except OSError:
                return ""

        flags = {f.lower() for f in ("sme", "sme2") if sysctl(f"hw.optional.arm.FEAT_{f.upper()}") == "1"}
        return CpuInfo(sysctl("machdep.cpu.brand_string") or arch, arch, system, frozenset(flags))
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text(errors="replace") if cpuinfo.exists() else ""
    name, features = parse_proc_cpuinfo(text, arch)
    return CpuInfo(name, arch, system, features)

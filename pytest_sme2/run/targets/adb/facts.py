"""What the claimed device is (model, SoC, Android version, ABI, CPU, whether /proc/cpuinfo lists sme2), read once
per session; it goes into every profile's metadata and the baselines' fingerprint."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_sme2.run.cpu import parse_proc_cpuinfo
from pytest_sme2.run.targets.adb.connection import AdbConnection

ABI_ARCH = {"arm64-v8a": "aarch64", "armeabi-v7a": "arm", "armeabi": "arm", "x86_64": "x86_64", "x86": "i386"}


@dataclass(frozen=True)
class DeviceFacts:
    """What the target knows about its device; goes into every profile's metadata."""

    serial: str
    model: str
    manufacturer: str
    soc: str
    android: str
    sdk: str
    abi: str
    kernel_arch: str
    cpu: str
    cores: int
    has_sme2: bool

    @property
    def arch(self) -> str:
        return ABI_ARCH.get(self.abi, self.kernel_arch)

    @property
    def described(self) -> str:
        return f"device {self.serial} ({self.manufacturer} {self.model}, SoC {self.soc}, Android {self.android})"


def read_facts(connection: AdbConnection) -> DeviceFacts:
    props: dict[str, str] = {}
    for line in connection.shell("getprop").stdout.splitlines():
        match = re.fullmatch(r"\[([^\]]*)\]: \[(.*)\]", line.strip())
        if match:
            props[match.group(1)] = match.group(2)
    cpuinfo = connection.shell("cat /proc/cpuinfo").stdout
    kernel_arch = connection.shell("uname -m").stdout.strip()
    abi = props.get("ro.product.cpu.abi", "")
    cpu_name, features = parse_proc_cpuinfo(cpuinfo, ABI_ARCH.get(abi, kernel_arch))
    cores = sum(1 for line in cpuinfo.splitlines() if re.match(r"processor\s*:\s*\d+", line))
    soc = props.get("ro.soc.model") or props.get("ro.board.platform") or props.get("ro.hardware") or "unknown SoC"
    return DeviceFacts(
        serial=connection.serial,
        model=props.get("ro.product.model", "unknown model"),
        manufacturer=props.get("ro.product.manufacturer", ""),
        soc=soc,
        android=props.get("ro.build.version.release", "?"),
        sdk=props.get("ro.build.version.sdk", "?"),
        abi=abi or kernel_arch,
        kernel_arch=kernel_arch,
        cores=cores,
        cpu=cpu_name if cpu_name not in (soc, kernel_arch, abi) else f"{abi or kernel_arch} CPU",
        has_sme2="sme2" in features,
    )

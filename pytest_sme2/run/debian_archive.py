"""Debian's archive through a scratch apt configuration: the mirror the system already uses, and apt options that
keep apt's lists, cache and sources in a folder of ours. Why: the emulated target's qemu (the binary package, or
the source package built with plugins) comes from Debian without root and without touching the system's apt."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pytest_sme2.errors import RunnerError


def debian_mirror() -> str:
    """The Debian mirror URI of the system's own apt sources (deb822 or one-line format)."""
    candidates: list[Path] = [Path("/etc/apt/sources.list")]
    parts = Path("/etc/apt/sources.list.d")
    if parts.is_dir():
        candidates += sorted(parts.glob("*.sources")) + sorted(parts.glob("*.list"))
    for path in candidates:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for match in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in match.group(1) and "debian" in match.group(1):
                return match.group(1).rstrip("/")
        for match in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", text, re.M):
            if "security" not in match.group(1) and "debian" in match.group(1):
                return match.group(1).rstrip("/")
    raise RunnerError(
        "no Debian mirror found in /etc/apt/sources.list(.d); the emulated target's qemu comes from Debian "
        "(the qemu source package from sid, or qemu-user 11.1 from trixie-backports or sid). Install a "
        "qemu-aarch64 >= 11.1 yourself and put it where `pytest-sme2 doctor` says"
    )


def apt_options(root: Path) -> list[str]:
    return [
        "-o",
        f"Dir::Etc::SourceList={root / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/dev/null",
        "-o",
        f"Dir::State::Lists={root / 'lists'}",
        "-o",
        f"Dir::Cache={root / 'cache'}",
        "-o",
        "Dir::State::status=/var/lib/dpkg/status",
        "-o",
        "Debug::NoLocking=1",
        # root's apt would drop to the _apt user, who cannot write into our cache folder
        *(["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []),
    ]

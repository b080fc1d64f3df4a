"""An independent oracle for the kernel trace: the functions a qemu ``-d in_asm`` log says were translated.

Production names the kernels that ran from the counted run's per-event functions (qemu_counts.py); these
tests rerun a runner command under qemu's own in_asm log (code translated, a superset of code run) and read
it here, so the two methods check each other.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from pytest_sme2.evidence.qemu_counts import AddressSpace

_BLOCK_START = re.compile(r"^0x([0-9a-f]+):")


def block_addresses(log: Path) -> Iterator[int]:
    """Start address of every translated block in a qemu ``-d in_asm`` log."""
    expect_start = False
    with open(log, errors="replace") as handle:
        for line in handle:
            if line.startswith("IN:"):
                expect_start = True
            elif expect_start:
                match = _BLOCK_START.match(line)
                if match:
                    yield int(match.group(1), 16)
                    expect_start = False


def translated_functions(log: Path, maps: Path) -> set[str]:
    """Names of the functions whose code qemu translated (only symbolised code counts), from the log and the
    runner's ``/proc/self/maps`` copy."""
    space = AddressSpace.from_file(maps)
    found: set[str] = set()
    for address in block_addresses(log):
        _, name = space.locate(address)
        if name is not None:
            found.add(name)
    return found

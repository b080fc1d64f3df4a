"""The guest's dynamic loader in a counted emulated run: every symbol bound at start-up, and its code kept out of
qemu's execution log.

Counting costs about a microsecond per executed block, all of it qemu writing its log (docs/performance.md), and
the loader is most of a runner's start-up: it relocates the ExecuTorch libraries (72% of a toy run's start-up
blocks). Its code is never the model's work, yet with lazy binding it also runs inside counted events, the first
time any function is called through a PLT slot, charging that cost to whichever operator called first (a first
layer removed then shows its first-call cost on the next layer's operators). So the counted run binds every
symbol at start-up (``LD_BIND_NOW=1`` in the guest's environment: no loader code runs inside an event after
that), and leaves the loader's address range out of the log (qemu's ``-dfilter``), so its start-up work costs
what it costs unlogged.

qemu maps the loader itself, before any guest code runs, at an address that depends only on qemu, the runner and
the address-space settings (``setarch -R``), not on the program or the guest's environment; it is asked of the
same qemu command (``LD_TRACE_LOADED_OBJECTS=1``: the loader maps the libraries, names where it and they are,
and exits without running the program), and checked against the counted run's own memory map afterwards.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from pytest_sme2.errors import RunnerError
from pytest_sme2.system.elf import function_symbols

BIND_NOW = ("-E", "LD_BIND_NOW=1")
_TRACE = ("-E", "LD_TRACE_LOADED_OBJECTS=1")
_PAGE = 0x1000
_TOP = 0xFFFF_FFFF_FFFF_FFFF
_OBJECT_LINE = re.compile(r"^\s*\S+ => (/\S+) \((0x[0-9a-f]+)\)\s*$", re.MULTILINE)  # "libx.so => /p (0x..)"
_MAPS_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+)\s+(\S+)\s+[0-9a-f]+\s+\S+\s+\d+\s+(/.+?)\s*$")


@dataclass(frozen=True)
class LoaderRange:
    """Guest addresses [start, end) of the loader's image (all its segments), and its file name; ``libraries``:
    where the loader put each library the runner needs ((path, load bias), from the same trace), which a counted
    run inside the emulator needs before it starts (its markers), and checks against its memory map after."""

    start: int
    end: int
    name: str
    libraries: tuple[tuple[str, int], ...] = ()

    def log_filter(self) -> tuple[str, str]:
        """qemu's ``-dfilter`` option logging every address but the loader's."""
        return "-dfilter", f"0..{self.start - 1:#x},{self.end:#x}..{_TOP:#x}"

    def check(self, maps_text: str, where: str) -> None:
        """The counted run's memory map (``where`` names it) put the loader where the log filter assumed and put
        no other code inside its range; else the log left out the wrong code and no count may be kept."""
        loader_code, intruders = [], []
        for line in maps_text.splitlines():
            match = _MAPS_LINE.match(line)
            if not match or "x" not in match.group(3):
                continue
            low, high, path = int(match.group(1), 16), int(match.group(2), 16), match.group(4)
            if Path(path).name == self.name:
                loader_code.append((low, high))
            elif low < self.end and high > self.start:
                intruders.append(path)
        misplaced = [f"{low:#x}-{high:#x}" for low, high in loader_code if low < self.start or high > self.end]
        if not loader_code or misplaced or intruders:
            raise RunnerError(
                f"the counted run's memory map ({where}) does not match where qemu was expected to put the loader "
                f"{self.name} ({self.start:#x}-{self.end:#x}): "
                f"{'its code is not mapped' if not loader_code else ''}{', '.join(misplaced)}"
                f"{' other code inside: ' + ', '.join(intruders) if intruders else ''}; the execution log left out "
                f"the wrong addresses, so the counts are not kept. Report this with the qemu version "
                f"(`qemu-aarch64 --version`)"
            )


def loader_range(command: Sequence[str], runner: Path, loader: Path, env: Mapping[str, str]) -> LoaderRange:
    """Where ``command`` (setarch, qemu and its CPU flags) maps ``loader`` (the runner's, from the sysroot) for
    ``runner``: the loader's own trace of the objects it loaded, its image size from its program headers."""
    traced = subprocess.run(
        [*command, *_TRACE, str(runner)], env=dict(env), capture_output=True, text=True, timeout=120
    )
    pattern = re.compile(rf"^\s*\S*{re.escape(loader.name)}\s+\((0x[0-9a-f]+)\)\s*$", re.MULTILINE)
    found = pattern.search(traced.stdout)
    if traced.returncode != 0 or found is None:
        raise RunnerError(
            f"`{' '.join([*command, *_TRACE, str(runner)])}` did not name where the loader {loader.name} was "
            f"mapped (exit {traced.returncode}): {(traced.stdout + traced.stderr).strip()[-400:]}; the counted run "
            f"needs it to keep the loader out of qemu's log"
        )
    base = int(found.group(1), 16)
    loads = function_symbols(loader).loads
    if not loads:
        raise RunnerError(f"{loader} has no loadable segments; is it the aarch64 dynamic loader?")
    low = min(vaddr for vaddr, _, _ in loads) // _PAGE * _PAGE
    high = -(-max(vaddr + size for vaddr, _, size in loads) // _PAGE) * _PAGE
    objects = tuple((path, int(bias, 16)) for path, bias in _OBJECT_LINE.findall(traced.stdout))
    return LoaderRange(base + low, base + high, loader.name, objects)

"""Samples of Linux ``perf record``, each with the library and file offset of the sampled code.

Why file offsets: the executorch wheels name only some kernels (the x86_64 one none
of the f32 XNNPACK kernels mobilenet runs), so ``perf script`` prints ``[unknown]``
for most of the time spent in ``libexecutorch_backend_xnnpack.so``. With the offset
in the file the kernel can still be named by its function's bounds from the unwind
tables (``system.elf.unwind_function_ranges``), the same on every run of one build.
``perf script`` of perf 6.1 (Debian 12) has no field for it, so it is computed here
from the mapping events (address - mapping start + mapping's file offset).

Samples are taken with a software clock (``cpu-clock``: hardware counters are not
there in most VMs) at a fixed period, so each sample stands for that much CPU time,
and stamped with CLOCK_MONOTONIC (``-k``), the clock ExecuTorch's ETDump ticks follow.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import UsageError

DEFAULT_PERIOD_NS = 100_000  # one sample per 0.1 ms of CPU time (10 kHz)
_SAMPLE = re.compile(r"^\s*(\d+)\s+(\d+)\.(\d{9}):\s+(\d+)\s+([0-9a-f]+)\s+(\S+)\s+\((.*)\)\s*$")
_MMAP = re.compile(
    r"^\s*\d+\s+\d+\.\d+:\s+PERF_RECORD_MMAP2?\s+\d+/\d+:\s+"
    r"\[0x([0-9a-f]+)\(0x([0-9a-f]+)\)\s+@\s+(?:0x)?([0-9a-f]+)[^\]]*\]:\s+\S+\s+(.*?)\s*$"
)
SCRIPT_FIELDS = "tid,time,period,ip,sym,dso"


@dataclass(frozen=True)
class Sample:
    """One sample: when (monotonic ns), which thread, how much CPU time it stands for, and where."""

    time_ns: int
    tid: int
    period_ns: int
    library: str  # path of the mapped file ("[kernel.kallsyms]" for the kernel)
    symbol: str | None  # as perf names it (mangled); None where perf has no name
    file_offset: int | None  # of the sampled address in ``library``; None outside a file mapping
    vaddr: int | None = None  # the address in the library's own address space, where the profiler gives it


def perf_executable() -> str:
    """The ``perf`` to use, or a UsageError saying how to get one."""
    found = shutil.which("perf")
    if found is None:
        raise UsageError(
            "kernel sampling needs Linux perf: `sudo apt-get install linux-perf` (Debian) or "
            "`sudo apt-get install linux-tools-$(uname -r)` (Ubuntu)"
        )
    return found


def permission_problem() -> str | None:
    """Why this user may not sample its own processes with perf, with the fix; None when it may."""
    if os.geteuid() == 0:
        return None
    level = _paranoid_level()
    if level is not None and level > 2:
        return (
            f"kernel.perf_event_paranoid is {level}, which keeps perf from users: "
            "`sudo sysctl kernel.perf_event_paranoid=2` (or run as root)"
        )
    return None


def sampling_event() -> str:
    """``cpu-clock``, or its user-space part where the kernel may not be sampled (perf_event_paranoid 2)."""
    level = _paranoid_level()
    return "cpu-clock" if os.geteuid() == 0 or (level is not None and level <= 1) else "cpu-clock:u"


def _paranoid_level() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def _record(perf: str, output: Path, period_ns: int) -> list[str]:
    return [
        perf,
        "record",
        "--quiet",
        "-e",
        sampling_event(),
        "-c",
        str(period_ns),
        "-k",
        "CLOCK_MONOTONIC",
        "-o",
        str(output),
    ]


def record_command(perf: str, pid: int, output: Path, period_ns: int = DEFAULT_PERIOD_NS) -> list[str]:
    """``perf record`` attached to a running process (every thread), until it is sent SIGINT."""
    return [*_record(perf, output, period_ns), "-p", str(pid)]


def wrap_command(perf: str, command: list[str], output: Path, period_ns: int = DEFAULT_PERIOD_NS) -> list[str]:
    """``command`` run under ``perf record`` (its threads and children); perf exits with the command's status."""
    return [*_record(perf, output, period_ns), "--", *command]


def read_samples(perf: str, data: Path) -> list[Sample]:
    """Every sample of a ``perf.data`` file, in time order."""
    done = subprocess.run(
        [perf, "script", "-i", str(data), "-F", SCRIPT_FIELDS, "--ns", "--no-demangle", "--show-mmap-events"],
        capture_output=True,
        text=True,
        errors="replace",
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"`perf script` could not read {data} (exit {done.returncode}): " f"{done.stderr.strip()[-500:]}"
        )
    return parse_script(done.stdout)


def parse_script(text: str) -> list[Sample]:
    """Samples from ``perf script -F tid,time,period,ip,sym,dso --ns --no-demangle --show-mmap-events``."""
    mappings: dict[str, list[tuple[int, int, int]]] = {}  # library -> sorted (start, end, file offset)
    raw: list[tuple[int, int, int, int, str, str]] = []
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample:
            tid, seconds, nanos, period, ip, symbol, library = sample.groups()
            raw.append((int(seconds) * 1_000_000_000 + int(nanos), int(tid), int(period), int(ip, 16), symbol, library))
            continue
        mapping = _MMAP.match(line)
        if mapping:
            start, length, offset, library = mapping.groups()
            bisect.insort(
                mappings.setdefault(library, []), (int(start, 16), int(start, 16) + int(length, 16), int(offset, 16))
            )
    samples = []
    for time_ns, tid, period, ip, symbol, library in raw:
        samples.append(
            Sample(
                time_ns,
                tid,
                period,
                library,
                None if symbol == "[unknown]" else symbol,
                _file_offset(mappings.get(library, ()), ip),
            )
        )
    samples.sort(key=lambda s: s.time_ns)
    return samples


def _file_offset(mapped: "list[tuple[int, int, int]] | tuple[()]", ip: int) -> int | None:
    """Where ``ip`` lies in the file mapped at it (the newest mapping covering it wins)."""
    for start, end, offset in reversed(mapped):
        if start <= ip < end:
            return ip - start + offset
    return None


def parse_simpleperf_samples(text: str) -> list[Sample]:
    """Samples from ``simpleperf report-sample`` text (Android): ``sample:`` blocks of ``key: value`` lines.

    Their addresses are ``vaddr_in_file`` (the library's own virtual addresses), not file offsets; times
    come from ``simpleperf record --clockid monotonic``. simpleperf names code it has no symbol for "unknown".
    """
    samples: list[Sample] = []
    fields: dict[str, str] | None = None

    def flush() -> None:
        if fields is None:
            return
        try:
            symbol = fields.get("symbol", "").strip()
            samples.append(
                Sample(
                    int(fields["time"]),
                    int(fields["thread_id"]),
                    int(fields["event_count"]),
                    fields.get("file", "").strip() or "[unknown]",
                    None if symbol in ("", "unknown") else symbol,
                    None,
                    int(fields["vaddr_in_file"], 16),
                )
            )
        except (KeyError, ValueError) as exc:
            raise RuntimeError(f"simpleperf report-sample printed a sample without {exc}: {fields}") from None

    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):  # a new record: "sample:", "meta_info:", "lost_situation:"
            flush()
            fields = {} if line.strip() == "sample:" else None
            continue
        if fields is not None and line.startswith("  ") and not line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "callchain:":
                continue
            fields.setdefault(key, value)
    flush()
    samples.sort(key=lambda s: s.time_ns)
    return samples

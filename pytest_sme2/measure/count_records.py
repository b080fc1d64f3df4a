"""The last counted run of each model, recipe and variant in a cache: what count_estimate.py estimates from.

One small JSON file per (model, recipe, variant) in ``<cache folder>/counted-runs/``, replaced after every
emulated count: its instructions (the whole process, as the counting plugin's progress file ends), its
inferences, the program's MACs, its emulator seconds and the machine they were measured on. The cache folder
is shared and restored from elsewhere, so every record is input: read through the one reader
(system/regular_files.py), every field checked, a bad record skipped with its reason, never trusted further
than an estimate (a forged record can make a progress line wrong, and a refusal needs an estimate's low end
above the timeout: a record claiming a huge count can at worst refuse a run whose fix the message names).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_sme2.system.names import slug
from pytest_sme2.system.regular_files import COUNT_RECORD, RefusedFile, read_bytes
from pytest_sme2.system.safe_files import write_file

RECORDS_FOLDER = "counted-runs"  # under the cache folder (--sme2-cache-dir)
VERSION = 1
_MOST = 500  # records read per session (the newest): an estimate needs this machine's rate, not a census


@dataclass(frozen=True)
class CountRecord:
    """One counted run: guest instructions of the whole process, the inferences it ran (warmup and timed), the
    program's known MACs an inference, the emulator's wall seconds, the machine (CPU name and cores) and when."""

    model: str
    recipe: str
    variant: str
    sme2: bool
    instructions: int
    inferences: int
    macs: float
    seconds: float
    machine: str
    recorded: str


def this_machine() -> str:
    """What a rate is measured on: the host CPU's name and the cores this process may use."""
    from pytest_sme2.run.cpu import host_cpu

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{host_cpu().name} x{cores}"


def record_path(cache_dir: Path, model: str, recipe: str, variant: str) -> Path:
    digest = hashlib.sha256(f"{model}\0{recipe}\0{variant}".encode()).hexdigest()[:16]
    return Path(cache_dir) / RECORDS_FOLDER / f"{slug(model, 60)}-{digest}.json"


def write_record(cache_dir: Path, record: CountRecord) -> Path:
    """Replace the record of its model, recipe and variant (atomically; never through a link)."""
    path = record_path(cache_dir, record.model, record.recipe, record.variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file(path, json.dumps({"version": VERSION, **asdict(record)}, indent=1) + "\n")


def _field(document: dict, name: str, kind: type) -> object:
    value = document.get(name)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"its {name!r} is {value!r}, not a {kind.__name__}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (not math.isfinite(value) or value < 0):
        raise ValueError(f"its {name!r} is {value!r}, not a finite number of at least 0")
    return value


def read_record(path: Path, within: Path) -> CountRecord:
    """One record, checked; RefusedFile or ValueError naming what is wrong."""
    try:
        document = json.loads(read_bytes(path, COUNT_RECORD, within=within))
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"it is not JSON text ({type(exc).__name__})") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError(f"it is not a version-{VERSION} record of pytest-sme2's")
    fields = {
        "model": str,
        "recipe": str,
        "variant": str,
        "sme2": bool,
        "instructions": int,
        "inferences": int,
        "macs": float,
        "seconds": float,
        "machine": str,
        "recorded": str,
    }
    return CountRecord(**{name: _field(document, name, kind) for name, kind in fields.items()})  # type: ignore[arg-type]


def read_records(cache_dir: Path) -> tuple[list[CountRecord], list[str]]:
    """The newest records of the cache, and a sentence for each one skipped (what it is and why)."""
    folder = Path(cache_dir) / RECORDS_FOLDER
    if not folder.is_dir() or folder.is_symlink():
        return [], []
    try:
        names = sorted(
            (entry for entry in os.scandir(folder) if entry.name.endswith(".json")),
            key=lambda entry: entry.stat(follow_symlinks=False).st_mtime,
            reverse=True,
        )[:_MOST]
    except OSError as exc:
        return [], [f"the counted-run records in {folder} cannot be listed ({exc}); no estimate uses them"]
    records, skipped = [], []
    for entry in names:
        try:
            records.append(read_record(Path(entry.path), folder))
        except (OSError, ValueError, RefusedFile) as exc:
            skipped.append(f"{entry.path} is skipped: {exc}; it is replaced after the next count of its model")
    return records, skipped


def now_text() -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime())

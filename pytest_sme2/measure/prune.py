"""Keeping ``.sme2/`` within a bound: the least recently used cache entries and the oldest session folders go.

Why: the export cache, the result cache and the session folders only grew (a user saw 12 GB in an hour). The
bound (``sme2_max_size``, ``sme2_keep_sessions``; docs/targets.md, "How big .sme2/ gets") is kept at the end
of every session and by ``pytest-sme2 cache prune``, both through :func:`prune`.

What goes, in order: session folders beyond the ``keep_sessions`` newest; anything last used more than
``older_than_days`` ago; then, while the total is above ``max_bytes``, whatever was used least recently. "Last
used" is the mtime of an entry's record, which every hit touches (system/last_use.py), and the start a session
folder's name records (measure/session.py); never the access time. The total counts each file once (a session's
program is a hard link to its export entry's) and only what the prune manages: entries and session folders.

What never goes: anything not named like an entry of its folder (a folder holding other things is refused as a
whole, with the fix); the current session's folder and every session whose process still runs; an entry whose
lock another process holds (an export or counted run being made: system/locks.py's lock, taken without waiting
and held while the entry is removed); an entry used since the oldest running session started (an export hit is
not locked, so recency is how a running session's entries are known); a baselines folder (a named folder inside
it, or holding it, is refused). Nothing is followed: an entry that is a link is removed as a link, and a tree is
removed by ``shutil.rmtree``, which removes links inside it as links.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from pytest_sme2.errors import StorageError, UsageError
from pytest_sme2.export.cache_entry import ENTRY_NAME, META_NAME
from pytest_sme2.measure.count_records import RECORDS_FOLDER
from pytest_sme2.measure.session import session_started
from pytest_sme2.run.result_cache import MANIFEST, RESULTS_FOLDER
from pytest_sme2.system.last_use import last_used
from pytest_sme2.system.locks import LOCKS_FOLDER, try_locked
from pytest_sme2.system.regular_files import kind_of

EXPORT_ENTRY, RESULT_ENTRY, SESSION = "export entry", "result entry", "session folder"
_RESULT_NAME = re.compile(r"[0-9a-f]{64}")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
DEFAULT_MAX_SIZE = "10GB"
DEFAULT_KEEP_SESSIONS = 20


def parse_size(text: str, where: str) -> int:
    """Bytes of a size as written: ``5GB``, ``500MB``, ``1.5 GiB``, ``0`` (no bound); KB/MB/GB/TB are powers of
    1000, KiB/MiB/GiB/TiB of 1024. UsageError naming ``where`` it was written, with examples, otherwise."""
    found = _SIZE.fullmatch(str(text))
    unit = found.group(2).lower() if found else None
    if found is None or unit not in _UNITS:
        raise UsageError(f"{where} is not a size: write a number and a unit, e.g. 5GB, 500MB or 1.5GiB (0: no bound)")
    return int(float(found.group(1)) * _UNITS[str(unit)])


def shown(size: int) -> str:
    """A byte count as the prune prints it, in the units the bound is written in: ``4.98 GB``, ``312 kB``."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}" if size < 100 * scale else f"{size // scale} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True)
class Bound:
    """What the prune keeps to; 0 turns each part off."""

    max_bytes: int = 0
    older_than_days: float = 0.0
    keep_sessions: int = 0


@dataclass(frozen=True)
class Folders:
    """The folders one prune looks at: the cache (``--sme2-cache-dir``: export entries and ``results/``) and the
    artifacts folder (``--sme2-artifacts-dir``: session folders), each None when it is not there; and the
    baselines folder, which nothing named may be inside of or hold."""

    cache: Path | None
    artifacts: Path | None
    baselines: Path | None = None


@dataclass
class Item:
    """One thing the prune may remove: an entry or a session folder, its files by inode (size), and why it must
    stay (``held``; None when it may go)."""

    path: Path
    kind: str
    last_used: float
    files: dict[tuple[int, int], int]
    lock: Path | None = None
    held: str | None = None
    started_pid: int | None = None  # a session folder's process


@dataclass
class Outcome:
    """What a prune did (or, dry, would do): each removed item with the bytes it freed, each item kept that the
    bound would have removed with why, and the total before and after."""

    before: int
    after: int = 0
    removed: list[tuple[Item, int]] = field(default_factory=list)
    skipped: list[tuple[Item, str]] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(size for _, size in self.removed)


def checked_folder(path: Path, what: str, fix: str) -> Path:
    """``path`` when it is a folder (a link to one is the folder the user named); UsageError naming it, what it
    is and ``fix`` otherwise (a file, a FIFO, nothing there)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(f"no {what} at {path}: {fix}") from None
    if not stat.S_ISDIR(mode):
        raise UsageError(f"the {what} {path} is {kind_of(mode)}, not a folder: {fix}")
    return path


def _files(path: Path) -> dict[tuple[int, int], int]:
    """Every file under ``path`` by (device, inode) with its size, never following a link (a link is a file of
    its own size); ``path`` itself when it is a link or a file."""
    found: dict[tuple[int, int], int] = {}
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return found
    if not stat.S_ISDIR(info.st_mode):
        return {(info.st_dev, info.st_ino): info.st_size}
    for root, folders, names in os.walk(path, followlinks=False):
        for name in names + [f for f in folders if os.path.islink(os.path.join(root, f))]:
            try:
                info = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            found[(info.st_dev, info.st_ino)] = info.st_size
    return found


def _refuse_strangers(folder: Path, strangers: list[str], what: str, holds: str, fix: str) -> None:
    if strangers:
        more = f" and {len(strangers) - 3} more" if len(strangers) > 3 else ""
        shown_names = ", ".join(sorted(strangers)[:3]) + more
        raise UsageError(
            f"refusing to prune {folder}: it is not a pytest-sme2 {what} (it holds {shown_names}; {holds}), and "
            f"pytest-sme2 never empties a folder that is not its own: {fix}"
        )


def _cache_items(cache: Path) -> list[Item]:
    items, strangers = [], []
    for child in sorted(cache.iterdir()):
        name = child.name
        if name.startswith(".") or name == LOCKS_FOLDER:
            continue  # locks are never removed (a holder may have one open); dot names are staging and ours
        if name in (RESULTS_FOLDER, RECORDS_FOLDER) and child.is_dir() and not child.is_symlink():
            continue  # results are listed below; counted-run records are a few hundred bytes per model
        if ENTRY_NAME.fullmatch(name):
            items.append(
                Item(child, EXPORT_ENTRY, last_used(child / META_NAME, child), _files(child), _lock(cache, name))
            )
        else:
            strangers.append(name)
    _refuse_strangers(
        cache,
        strangers,
        "cache folder",
        "a cache holds MODEL-RECIPE-KEY entries, results/, counted-runs/ and locks/",
        "point --cache-dir at the folder of --sme2-cache-dir (default .sme2/cache), or move those out of it",
    )
    results = cache / RESULTS_FOLDER
    if results.is_dir() and not results.is_symlink():
        strangers = []
        for child in sorted(results.iterdir()):
            if child.name.startswith("."):
                continue
            if _RESULT_NAME.fullmatch(child.name):
                lock = _lock(cache, f"result-{child.name}")
                items.append(Item(child, RESULT_ENTRY, last_used(child / MANIFEST, child), _files(child), lock))
            else:
                strangers.append(child.name)
        _refuse_strangers(
            results,
            strangers,
            "result cache",
            "a result cache holds one folder per sha256 key",
            "move those out of it, or point --cache-dir at the folder of --sme2-cache-dir",
        )
    return items


def _lock(cache: Path, name: str) -> Path:
    return cache / LOCKS_FOLDER / f"{name}.lock"


def _session_items(artifacts: Path) -> list[Item]:
    items, strangers = [], []
    for child in sorted(artifacts.iterdir()):
        if child.name.startswith("."):
            continue  # .gitignore
        started = session_started(child.name)
        if started is None:
            strangers.append(child.name)
            continue
        items.append(Item(child, SESSION, started[0], _files(child), started_pid=started[1]))
    _refuse_strangers(
        artifacts,
        strangers,
        "artifacts folder",
        "an artifacts folder holds session-YYYYMMDD-HHMMSS-PID-RANDOM folders",
        "point --artifacts-dir at the folder of --sme2-artifacts-dir (default .sme2/artifacts), or move those "
        "out of it",
    )
    return items


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs here (someone else's counts): a session folder of one is never removed.
    A pid reused since (or another container's) keeps its folder too: a folder kept is never a loss."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse_baselines(folders: Folders) -> None:
    if folders.baselines is None:
        return
    baselines = os.path.realpath(folders.baselines)
    for what, folder in (("cache folder", folders.cache), ("artifacts folder", folders.artifacts)):
        if folder is None:
            continue
        real = os.path.realpath(folder)
        if any(a == b or a.startswith(b.rstrip(os.sep) + os.sep) for a, b in ((real, baselines), (baselines, real))):
            raise UsageError(
                f"refusing to prune the {what} {folder}: it is, holds or lies in the baselines folder "
                f"{folders.baselines}, which pytest-sme2 never removes anything from: give a {what} of its own "
                "(--sme2-cache-dir and --sme2-artifacts-dir default to .sme2/cache and .sme2/artifacts)"
            )


def scan(folders: Folders, current: Path | None = None, running_since: float | None = None) -> list[Item]:
    """Every item of ``folders``, each marked ``held`` when it must stay: ``current`` (this session's folder), a
    session whose process runs, a cache entry used since ``running_since`` or since the oldest running session
    started. UsageError for a named folder that is not pytest-sme2's or touches the baselines folder."""
    _refuse_baselines(folders)
    items = (_cache_items(folders.cache) if folders.cache else []) + (
        _session_items(folders.artifacts) if folders.artifacts else []
    )
    current_real = os.path.realpath(current) if current is not None else None
    starts = [running_since] if running_since is not None else []
    for item in items:
        if item.kind != SESSION:
            continue
        if current_real is not None and os.path.realpath(item.path) == current_real:
            item.held = "it is this session's folder"
        elif item.started_pid is not None and _alive(item.started_pid):
            item.held = f"its session (pid {item.started_pid}) is still running"
        if item.held:
            starts.append(item.last_used)
    since = min(starts) if starts else None
    for item in items:
        if item.kind != SESSION and since is not None and item.last_used >= since:
            item.held = f"it was used since {_when(since)}, by a session still running"
    return items


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def total(items: list[Item]) -> int:
    """The bytes ``items`` hold, each file once."""
    sizes: dict[tuple[int, int], int] = {}
    for item in items:
        sizes.update(item.files)
    return sum(sizes.values())


def _order(items: list[Item], bound: Bound, now: float) -> Iterator[tuple[Item, bool]]:
    """Each item the bound may remove, with whether it must go whatever the total (beyond keep_sessions, or older
    than older_than_days) or only while the total is above max_bytes; those first, then least recently used."""
    forced: set[int] = set()
    if bound.keep_sessions:
        sessions = sorted((i for i in items if i.kind == SESSION), key=lambda i: i.last_used, reverse=True)
        forced |= {id(i) for i in sessions[bound.keep_sessions :]}
    if bound.older_than_days:
        cutoff = now - bound.older_than_days * 86400
        forced |= {id(i) for i in items if i.last_used < cutoff}
    by_age = sorted(items, key=lambda i: i.last_used)
    yield from ((i, True) for i in by_age if id(i) in forced)
    if bound.max_bytes:
        yield from ((i, False) for i in by_age if id(i) not in forced)


def prune(
    folders: Folders,
    bound: Bound,
    *,
    dry_run: bool = False,
    current: Path | None = None,
    running_since: float | None = None,
    now: float | None = None,
) -> Outcome:
    """Remove (``dry_run``: only list) what ``bound`` says must go from ``folders``, never what must stay
    (module docstring). The total after is measured again when something was removed."""
    items = scan(folders, current, running_since)
    references: dict[tuple[int, int], int] = {}
    for item in items:
        for inode in item.files:
            references[inode] = references.get(inode, 0) + 1
    sizes = {inode: size for item in items for inode, size in item.files.items()}
    outcome = Outcome(before=total(items))
    remaining = outcome.before
    for item, forced in _order(items, bound, time.time() if now is None else now):
        if not forced and remaining <= bound.max_bytes:
            break
        if item.held:
            outcome.skipped.append((item, item.held))
            continue
        with _claimed(item, dry_run) as claim:
            if claim:
                outcome.skipped.append((item, claim))
                continue
            freed = sum(sizes[inode] for inode in item.files if references[inode] == 1)
            if not dry_run:
                problem = remove(item.path)
                if problem:
                    outcome.skipped.append((item, problem))
                    continue
            for inode in item.files:
                references[inode] -= 1
            outcome.removed.append((item, freed))
            remaining -= freed
    outcome.after = remaining
    if outcome.removed and not dry_run:
        outcome.after = total(scan(folders, current, running_since))
    return outcome


class _claimed:
    """The entry's lock, taken without waiting for as long as it is removed: yields None when taken (or the item
    has none), else why it stays. A dry run creates no lock file (no file there: nobody holds it)."""

    def __init__(self, item: Item, dry_run: bool) -> None:
        self.item, self.dry_run = item, dry_run
        self._held = None if item.lock is None else try_locked(item.lock, create=not dry_run)

    def __enter__(self) -> str | None:
        if self._held is None:
            return None
        try:
            taken = self._held.__enter__()
        except (OSError, StorageError) as exc:  # a link planted at the lock, or no room for the lock file
            self._held = None
            return f"its lock {self.item.lock} cannot be taken ({exc})"
        return None if taken else f"another process holds its lock {self.item.lock} (it is being made or used)"

    def __exit__(self, *exc: object) -> None:
        if self._held is not None:
            self._held.__exit__(None, None, None)


def remove(path: Path) -> str | None:
    """Remove ``path`` without following a link: a link (or a file) is unlinked, a folder removed as a tree
    (``shutil.rmtree`` never follows the links inside it). None when done or already gone; else why not."""
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be removed: {exc.strerror or exc} ({exc.filename or path})"
    return None

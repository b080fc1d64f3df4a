"""The emulated target's result cache: a counted run whose every input is unchanged is answered from disk.

Why: under emulation every counted quantity is a pure function of the run's inputs (the program, the input
tensors, the native runner and every library it loads, qemu and its CPU settings, the counting code, the
run settings), identical in every run however busy the machine; re-emulating an unchanged program
recomputes a known answer at tens of seconds a variant. The key is a sha256 over the bytes of each input,
never a name or a date. An entry holds the files the run left (ETDumps, outputs, counts, logs), each file's
sha256 and the run's evidence; it is checked on every use, and a damaged one is reported, removed and run
again. Entries are written whole into a temporary folder and renamed into place, so xdist workers and
sessions on one machine share them safely; a run of a key another process is computing waits for that
answer (``computing``) instead of emulating it twice. docs/targets.md, "The result cache".
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Iterable, Mapping

from pytest_sme2.errors import DamagedCacheEntryWarning, StorageError
from pytest_sme2.system.digests import file_sha256, tree_digest
from pytest_sme2.system.last_use import mark_used
from pytest_sme2.system.locks import entry_lock
from pytest_sme2.system.plain_text import one_line
from pytest_sme2.system.regular_files import RESULT_RECORD, RefusedFile, read_bytes
from pytest_sme2.system.safe_files import copy_file, write_file

RESULTS_FOLDER = "results"  # under the cache folder (--sme2-cache-dir)
ENTRY_FORMAT = 1
MANIFEST = "result.json"
PACKAGE = Path(__file__).resolve().parent.parent  # pytest_sme2/
# What can change a count: the package's Python (the counting, the runner's command line, reading its
# answer) and the native sources the runner and the counter are built from.
CODE_SUFFIXES = (".py", ".c", ".cpp", ".h", ".txt", ".cmake")


def code_digest(root: Path = PACKAGE) -> str:
    """sha256 of every source file under ``root`` (relative path and bytes, in sorted order)."""
    return tree_digest(root, CODE_SUFFIXES)


@dataclass(frozen=True)
class RunKey:
    """The key of one counted run and what went into it (each ingredient's sha256 or value)."""

    digest: str
    ingredients: Mapping[str, str]

    @property
    def short(self) -> str:
        return self.digest[:16]


@dataclass(frozen=True)
class LoadedRunner:
    """The native runner as the emulator loads it: its ``binary`` and every shared library it loads
    (``libraries``: a kernel kit's and the instruction counter's too, wherever they live).

    They travel together because together they are the code that runs: a byte of any of them can change
    a count, so each is keyed by its bytes, the libraries by name (not by folder) in sorted order."""

    binary: Path
    libraries: tuple[Path, ...]


def run_key(
    *,
    program: Path,
    inputs: Path | None,
    runner: LoadedRunner,
    emulator: Path,
    cpu: str,
    settings: Mapping[str, Any],
    code: str,
) -> RunKey:
    """The key of a counted run: the bytes of the program, the inputs, the runner, each library it loads and
    the emulator; the emulated CPU (SVL, SME2 on or off); the run settings; the counting code's digest."""
    ingredients: dict[str, str] = {
        "program": file_sha256(program),
        "inputs": "none" if inputs is None else file_sha256(inputs),
        "runner": file_sha256(runner.binary),
        "emulator": file_sha256(emulator),
        "cpu": cpu,
        "settings": json.dumps(dict(settings), sort_keys=True, default=str),
        "code": code,
    }
    for library in sorted(set(Path(p) for p in runner.libraries), key=lambda p: p.name):
        ingredients[f"library {library.name}"] = file_sha256(library)
    digest = hashlib.sha256(json.dumps(ingredients, sort_keys=True).encode()).hexdigest()
    return RunKey(digest, ingredients)


def _other_request(ingredients: Any, key: RunKey) -> str | None:
    """Why an entry's manifest answers for another run than ``key`` (None: the same run).

    Why: an entry's folder name and its manifest's ``key`` are only names; a folder copied under another key,
    with ``key`` edited, would pass every digest of its own files. The manifest also records what the run was
    of (each ingredient: the program's sha256, the inputs', the runner's, ...), and those must be the request's,
    whose digest is the key. A writer who forges both is trusted by design: see docs/export.md, "Who may
    write the cache"."""
    if not isinstance(ingredients, dict):
        return f"{MANIFEST} does not record what the run was of (its ingredients)"
    differ = sorted(
        name for name in set(ingredients) | set(key.ingredients) if ingredients.get(name) != key.ingredients.get(name)
    )
    if not differ:
        return None
    name = differ[0]
    return (
        f"it answers for another run: its {name} is {_shown(ingredients.get(name))}, this run's "
        f"{_shown(key.ingredients.get(name))}"
        + (f" ({len(differ) - 1} more ingredient(s) differ)" if len(differ) > 1 else "")
    )


def _shown(value: Any) -> str:
    """An ingredient as an error shows it: a digest cut to 16 characters, anything else as its repr, cut."""
    text = one_line(value) if isinstance(value, str) else repr(value)
    return f"{text[:16]}..." if len(text) > 16 else text


class _Damaged(Exception):
    """Why an entry cannot be used (the message names the file or field)."""


class ResultCache:
    """Counted runs by key, in ``root`` (``<cache folder>/results``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def entry(self, key: RunKey) -> Path:
        return self.root / key.digest

    def computing(self, key: RunKey) -> ContextManager[None]:
        """Held while one process looks ``key`` up and, on a miss, runs and stores it: xdist workers and
        sessions wanting the same counted run wait for the first one's answer instead of each emulating it
        (tens of seconds a variant). An flock beside the cache (system/locks.py): it dies with its process."""
        return entry_lock(self.root.parent, f"result-{key.digest}")

    def load(self, key: RunKey, out_dir: Path) -> dict[str, Any] | None:
        """Copy the entry's files into ``out_dir`` and return its evidence, or None on a miss. A damaged
        entry is reported (DamagedCacheEntryWarning), removed and answered as a miss: never used."""
        directory = self.entry(key)
        if not os.path.lexists(directory):
            return None
        try:
            manifest = self._check(directory, key)
        except _Damaged as damage:
            self._discard(directory, damage)
            return None
        mark_used(directory / MANIFEST)  # a hit: the entry is the most recently used (pytest-sme2 cache prune)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in manifest["files"]:
            copy_file(directory / name, out_dir / name)
        return dict(manifest["evidence"])

    def discard(self, key: RunKey, why: str) -> None:
        """Remove an entry that is whole but not what this code writes under its key (``why``), with the
        damaged-entry warning: it is never used, and the run is emulated again and stored."""
        self._discard(self.entry(key), _Damaged(why))

    def store(self, key: RunKey, out_dir: Path, names: Iterable[str], evidence: Mapping[str, Any]) -> None:
        """Keep ``names`` (files of ``out_dir``) and ``evidence`` under ``key``; the first writer wins."""
        final = self.entry(key)
        if os.path.lexists(final):
            return
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".{key.short}.{secrets.token_hex(6)}.tmp"
        os.mkdir(staging, 0o755)
        try:
            files = {}
            for name in names:
                copy_file(out_dir / name, staging / name)
                files[name] = file_sha256(staging / name)
            write_file(
                staging / MANIFEST,
                json.dumps(
                    {
                        "format": ENTRY_FORMAT,
                        "key": key.digest,
                        "files": files,
                        "evidence": dict(evidence),
                        "ingredients": dict(key.ingredients),
                    },
                    indent=1,
                    default=str,
                ),
            )
            try:
                os.rename(staging, final)
            except OSError:
                if not os.path.lexists(final):  # not "another worker stored it first": a real failure
                    raise
        except OSError as exc:
            raise StorageError(
                f"cannot store the counted run in the result cache {self.root}: {exc}; make it "
                "writable or choose another --sme2-cache-dir"
            ) from None
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def _check(directory: Path, key: RunKey) -> dict[str, Any]:
        if directory.is_symlink() or not directory.is_dir():
            raise _Damaged("it is not a folder")
        try:
            manifest = json.loads(read_bytes(directory / MANIFEST, RESULT_RECORD, within=directory))
        except FileNotFoundError:
            raise _Damaged(f"{MANIFEST} is missing") from None
        except RefusedFile as refused:  # a FIFO here would hang the lookup while it holds the entry's lock
            raise _Damaged(f"{MANIFEST} {refused.reason}") from None
        except RecursionError:
            raise _Damaged(f"{MANIFEST} is nested too deeply to be an entry's manifest") from None
        except (OSError, ValueError) as exc:
            raise _Damaged(f"{MANIFEST} does not decode ({str(exc).splitlines()[0] if str(exc) else exc!r})") from None
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != ENTRY_FORMAT
            or manifest.get("key") != key.digest
        ):
            raise _Damaged(f"{MANIFEST} is not format {ENTRY_FORMAT} of key {key.short}")
        answered = _other_request(manifest.get("ingredients"), key)
        if answered:
            raise _Damaged(answered)
        files, evidence = manifest.get("files"), manifest.get("evidence")
        if (
            not isinstance(files, dict)
            or not files
            or not isinstance(evidence, dict)
            or not all(
                isinstance(name, str) and "/" not in name and isinstance(sha, str) and len(sha) == 64
                for name, sha in files.items()
            )
        ):
            raise _Damaged(f"{MANIFEST}'s files or evidence are not what an entry holds")
        for name, stored in files.items():
            path = directory / name
            if path.is_symlink():
                raise _Damaged(f"{name} is a link")
            try:
                actual = file_sha256(path, within=directory)
            except FileNotFoundError:
                raise _Damaged(f"{name} is missing") from None
            except RefusedFile as refused:  # a FIFO (a tar archive restores one): refused, the lock released
                raise _Damaged(f"{name} {refused.reason}") from None
            except OSError as exc:
                raise _Damaged(f"{name} is unreadable ({exc})") from None
            if actual != stored:
                raise _Damaged(
                    f"{name} is not what the run wrote: its sha256 begins {actual[:16]}, the one "
                    f"{MANIFEST} stored {stored[:16]}"
                )
        return manifest

    @staticmethod
    def _discard(directory: Path, damage: _Damaged) -> None:
        warnings.warn(
            DamagedCacheEntryWarning(
                f"result cache entry {os.path.abspath(directory)} is damaged: {damage}. It is not used: it is removed "
                "and the run is emulated again."
            ),
            stacklevel=4,
        )
        try:
            if directory.is_dir() and not directory.is_symlink():
                shutil.rmtree(directory)
            else:
                directory.unlink()
        except FileNotFoundError:
            pass  # another worker removed it first
        except OSError as exc:
            raise StorageError(
                f"result cache entry {directory} is damaged ({damage}) and cannot be removed: "
                f"{exc}. Remove it by hand, or use another --sme2-cache-dir"
            ) from None

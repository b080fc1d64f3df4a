"""One export cache entry's layout and its checks: the files an entry holds, its export.json's shape, every
file's sha256 against what its export stored, and its program facts. Every use of an entry (an export's cache
hit, export_llm, ``pytest-sme2 cache verify``) checks it here, since a shared cache folder is another writer's
input (docs/export.md, "Who may write the cache")."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pytest_sme2.export.export_key import KEY_CHARS
from pytest_sme2.export.work import FACTS_FILE, FACTS_VERSION, decode_facts
from pytest_sme2.system.digests import file_sha256
from pytest_sme2.system.regular_files import EXPORT_RECORD, RefusedFile, read_bytes

# 2: int8 reference outputs come from the quantized model; 3: keyed by the traced program's content;
# 4: export.json holds every file's sha256, checked whenever the entry is used; 5: each graph node of the
# delegation record has a 5th field, the digest of the weights it reads (graph_nodes.py); 6: the nodes a
# decomposition made from one operator are named after that operator (identity.group_names)
EXPORT_FORMAT_VERSION = 6
PTE_NAME = "model.pte"
ETRECORD_NAME = "model.etrecord"
INPUTS_NAME = "inputs.pt"
REFERENCE_NAME = "reference_outputs.pt"
META_NAME = "export.json"
CHECKED_FILES = (PTE_NAME, ETRECORD_NAME, INPUTS_NAME, REFERENCE_NAME)  # their sha256 is in export.json
# An entry's folder name: MODEL-RECIPE-KEY (model exports) or MODEL-export_llama-RECIPE-KEY (export_llm)
ENTRY_NAME = re.compile(rf".+-[0-9a-f]{{{KEY_CHARS}}}")


class DamagedEntry(Exception):
    """Why an existing cache entry cannot be used (the message names the file or field)."""


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def meta_problem(meta: Any, key: str, digest: str) -> str | None:
    """What is wrong with an entry's export.json for the program of this ``digest`` under this ``key``, or None."""
    if not isinstance(meta, dict):
        return f"{META_NAME} holds a JSON {type(meta).__name__}, not an object"
    if meta.get("format") != EXPORT_FORMAT_VERSION:
        return f"{META_NAME} has format {meta.get('format')!r}, not {EXPORT_FORMAT_VERSION}"
    for name, want in (("cache_key", key), ("program_digest", digest)):
        if meta.get(name) != want:
            return f"{META_NAME}'s {name} is {meta.get(name)!r}, not this entry's {want!r}"
    return record_problem(meta, CHECKED_FILES)


def record_problem(meta: dict[str, Any], checked: tuple[str, ...]) -> str | None:
    """What is wrong with the fields every entry records (model export and export_llm alike): export_seconds a
    finite number >= 0, the delegation record's shape, and ``files`` the sha256 of exactly ``checked``; None."""
    seconds = meta.get("export_seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        return f"{META_NAME}'s export_seconds is {seconds!r}, not a number"
    delegation = meta.get("delegation")
    if not isinstance(delegation, dict):
        return f"{META_NAME}'s delegation is {type(delegation).__name__}, not an object"
    for key in ("delegated_nodes", "non_delegated_nodes", "delegated_subgraphs"):
        if not _count(delegation.get(key)):
            return f"{META_NAME}'s delegation.{key} is {delegation.get(key)!r}, not a count"
    ops = delegation.get("ops")
    if not isinstance(ops, list) or not all(
        isinstance(op, dict)
        and isinstance(op.get("op_type"), str)
        and _count(op.get("delegated"))
        and _count(op.get("non_delegated"))
        for op in ops
    ):
        return f"{META_NAME}'s delegation.ops is not a list of {{op_type, delegated, non_delegated}}"
    files = meta.get("files")
    if (
        not isinstance(files, dict)
        or sorted(files) != sorted(checked)
        or not all(isinstance(v, str) and len(v) == 64 for v in files.values())
    ):
        return f"{META_NAME}'s files is {files!r}, not the sha256 of each of {', '.join(checked)}"
    return None


def read_meta(directory: Path) -> Any:
    """An entry's export.json, decoded (its shape is meta_problem's to check); DamagedEntry when it is missing or
    does not decode."""
    try:
        return json.loads(read_bytes(directory / META_NAME, EXPORT_RECORD, within=directory))
    except FileNotFoundError:
        raise DamagedEntry(f"{META_NAME} is missing") from None
    except RefusedFile as refused:
        raise DamagedEntry(f"{META_NAME} {refused.reason}") from None
    except RecursionError:
        raise DamagedEntry(f"{META_NAME} is nested too deeply to be an entry's record") from None
    except (OSError, ValueError) as exc:
        raise DamagedEntry(f"{META_NAME} does not decode ({first_line(exc)})") from None


def check_files(directory: Path, meta: dict[str, Any]) -> None:
    """DamagedEntry when a file of the entry is missing, unreadable, or not the sha256 its export.json stored."""
    for name, stored in meta["files"].items():
        try:
            actual = file_sha256(directory / name, within=directory)
        except FileNotFoundError:
            raise DamagedEntry(f"{name} is missing") from None
        except RefusedFile as refused:  # a FIFO, a device, a link out of the entry: refused, never waited on
            raise DamagedEntry(f"{name} {refused.reason}") from None
        except OSError as exc:
            raise DamagedEntry(f"{name} is unreadable ({first_line(exc)})") from None
        if actual != stored:
            size = (directory / name).stat().st_size
            raise DamagedEntry(
                f"{name} ({size} bytes) is not what was exported: its sha256 begins {actual[:16]}, "
                f"the one {META_NAME} stored {stored[:16]}"
            )


def check_facts(directory: Path) -> None:
    """DamagedEntry when the entry's program facts (program.json) are missing or do not decode."""
    try:
        facts = json.loads(read_bytes(directory / FACTS_FILE, EXPORT_RECORD, within=directory))
        # Another version is stale, not damaged: work.ProgramFacts.of computes it again from the program.
        if not isinstance(facts, dict) or facts.get("version") == FACTS_VERSION:
            decode_facts(facts, str(directory / PTE_NAME))
    except FileNotFoundError:
        raise DamagedEntry(f"{FACTS_FILE} is missing") from None
    except RefusedFile as refused:
        raise DamagedEntry(f"{FACTS_FILE} {refused.reason}") from None
    except RecursionError:
        raise DamagedEntry(f"{FACTS_FILE} is nested too deeply to be program facts") from None
    except OSError as exc:
        raise DamagedEntry(f"{FACTS_FILE} is unreadable ({first_line(exc)})") from None
    except ValueError as exc:  # not JSON, or decode_facts naming the part
        raise DamagedEntry(f"{FACTS_FILE} does not decode: {exc}") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")

"""Cheap structural checks of a .pte before any runtime touches it.

The ExecuTorch runtime rejects a truncated program too, but only once a
method is loaded, with an error code; checking the header first gives a
message that names the file and what is wrong with it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from pytest_sme2.errors import ProgramError
from pytest_sme2.system.regular_files import PROGRAM, RefusedFile, open_checked, read_bytes

_EXTENDED_HEADER_MAGIC = b"eh00"


def check_program(path: str | Path) -> Path:
    """Raise ProgramError unless ``path`` looks like a complete ExecuTorch program."""
    path = Path(path)
    hint = "re-export it (delete its cache entry) or point the test at the right file"
    if not path.exists():
        raise ProgramError(f"program {path} does not exist; {hint}")
    try:
        with open_checked(path, PROGRAM) as handle:  # the one reader: a FIFO, a device or a 2^62-byte file refused
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(44)
    except RefusedFile as refused:
        raise ProgramError(f"program {path} {refused.reason}; {hint}") from None
    if size < 8 or head[4:6] != b"ET":
        raise ProgramError(
            f"{path} is not an ExecuTorch program (file identifier {head[4:8]!r}, expected b'ET..'); {hint}"
        )
    # Every program the 1.x exporter writes carries the extended header:
    # magic, header length, program size, segment base offset, segment data size.
    if head[8:12] != _EXTENDED_HEADER_MAGIC or len(head) < 40:
        raise ProgramError(f"program {path} is truncated or has no extended header ({size} bytes); {hint}")
    header_length, program_size, segment_base = struct.unpack_from("<IQQ", head, 12)
    segment_size = struct.unpack_from("<Q", head, 32)[0] if header_length >= 32 else 0
    expected = segment_base + segment_size if segment_size else program_size
    if size < expected:
        raise ProgramError(f"program {path} is truncated: {size} bytes, its header says {expected}; {hint}")
    return path


def planned_buffers(path: str | Path) -> list[int]:
    """Sizes in bytes of the forward method's memory-planned buffers, as the exporter planned them.

    Deterministic from the .pte alone (the runtime allocates exactly these for activations), read with
    ExecuTorch's own deserializer; the same list the runtime's MethodMeta reports (the native runner's answer).
    """
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        program = deserialize_pte_binary(read_bytes(path, PROGRAM))
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad program
        raise ProgramError(f"cannot read the execution plan of {path}: {type(exc).__name__}: {exc}") from None
    plans = getattr(program, "program", program).execution_plan
    plan = next((p for p in plans if p.name == "forward"), plans[0] if plans else None)
    if plan is None:
        raise ProgramError(f"program {path} has no execution plan")
    return [int(size) for size in plan.non_const_buffer_sizes[1:]]  # entry 0 is ExecuTorch's reserved slot

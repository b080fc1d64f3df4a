"""Synthetic ETDumps, so tests and benchmarks know every event time exactly. The reader (etdump.py) reads them
like a runner's: size-prefixed.

Written with the flatbuffers builder (ExecuTorch's own dependency) table by table, in the layout of ExecuTorch's
etdump_schema_flatcc.fbs: ExecuTorch's serializer goes through JSON and the flatc compiler, which took 121 s
for 200,000 events and did not finish a million in 900 s (issue 64), so a many-run session could not be tested.
``write_synthetic_etdump(..., serializer="executorch")`` still writes through ExecuTorch's serializer: the
reader's tests read both and must find the same events.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import flatbuffers

from pytest_sme2.system.safe_files import write_file

_IDENTIFIER = b"ED00"
# Field slots of etdump_schema_flatcc.fbs's tables, in their declaration order.
_PROFILE_EVENT_FIELDS = 8  # name, chain_index, instruction_id, delegate_debug_id_int, delegate_debug_id_str, ...
_NAME, _INSTRUCTION_ID, _DELEGATE_INT, _DELEGATE_STR, _START, _END = 0, 2, 3, 4, 6, 7
_EVENT_FIELDS = 3  # profile_event, allocation_event, debug_event
_RUN_DATA_FIELDS = 4  # name, bundled_input_index, allocators, events
_ETDUMP_FIELDS = 2  # version, run_data


@dataclass(frozen=True)
class SyntheticEvent:
    """An event to write: a runtime event (name) or a delegate op (delegate_name)."""

    start_ns: int
    end_ns: int
    name: str | None = None
    delegate_name: str | None = None
    instruction_id: int = -1


def write_synthetic_etdump(
    path: str | Path,
    blocks: list[tuple[str, list[SyntheticEvent]]],
    serializer: Literal["builder", "executorch"] = "builder",
) -> Path:
    """Serialise blocks of events as an ETDump; ``serializer`` as the module docstring says."""
    data = _built(blocks) if serializer == "builder" else _serialized(blocks)
    # The runtime writes size-prefixed ETDumps; so do we, so readers see one layout.
    return write_file(path, struct.pack("<I", len(data)) + data)


def _built(blocks: list[tuple[str, list[SyntheticEvent]]]) -> bytes:
    builder = flatbuffers.Builder(1 << 16)
    strings: dict[str, int] = {}

    def string(text: str) -> int:
        if text not in strings:
            strings[text] = builder.CreateString(text)
        return strings[text]

    def vector(offsets: list[int]) -> int:
        builder.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            builder.PrependUOffsetTRelative(offset)
        return int(builder.EndVector())

    runs = []
    for block_name, events in blocks:
        made = []
        for ev in events:
            name = None if ev.name is None else string(ev.name)
            delegate = None if ev.delegate_name is None else string(ev.delegate_name)
            builder.StartObject(_PROFILE_EVENT_FIELDS)
            if name is not None:
                builder.PrependUOffsetTRelativeSlot(_NAME, name, 0)
            builder.PrependInt32Slot(_INSTRUCTION_ID, ev.instruction_id, -1)
            if delegate is not None:
                builder.PrependUOffsetTRelativeSlot(_DELEGATE_STR, delegate, 0)
            builder.PrependUint64Slot(_START, ev.start_ns, 0)
            builder.PrependUint64Slot(_END, ev.end_ns, 0)
            profile_event = builder.EndObject()
            builder.StartObject(_EVENT_FIELDS)
            builder.PrependUOffsetTRelativeSlot(0, profile_event, 0)
            made.append(builder.EndObject())
        events_vector, allocators, name = vector(made), vector([]), string(block_name)
        builder.StartObject(_RUN_DATA_FIELDS)
        builder.PrependUOffsetTRelativeSlot(0, name, 0)
        builder.PrependInt32Slot(1, -1, -1)
        builder.PrependUOffsetTRelativeSlot(2, allocators, 0)
        builder.PrependUOffsetTRelativeSlot(3, events_vector, 0)
        runs.append(builder.EndObject())
    run_vector = vector(runs)
    builder.StartObject(_ETDUMP_FIELDS)
    builder.PrependUint32Slot(0, 0, 0)
    builder.PrependUOffsetTRelativeSlot(1, run_vector, 0)
    builder.Finish(builder.EndObject(), file_identifier=_IDENTIFIER)
    return bytes(builder.Output())


def _serialized(blocks: list[tuple[str, list[SyntheticEvent]]]) -> bytes:
    """Through executorch.devtools.etdump's schema and serializer (JSON, then flatc)."""
    from executorch.devtools.etdump import schema_flatcc as s
    from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc

    run_data = []
    for block_name, events in blocks:
        run_data.append(
            s.RunData(
                name=block_name,
                bundled_input_index=-1,
                allocators=[],
                events=[
                    s.Event(
                        profile_event=s.ProfileEvent(
                            name=ev.name,
                            chain_index=0,
                            instruction_id=ev.instruction_id,
                            delegate_debug_id_int=-1,
                            delegate_debug_id_str=ev.delegate_name,
                            delegate_debug_metadata=None,
                            start_time=ev.start_ns,
                            end_time=ev.end_ns,
                        ),
                        allocation_event=None,
                        debug_event=None,
                    )
                    for ev in events
                ],
            )
        )
    return bytes(serialize_to_etdump_flatcc(s.ETDumpFlatCC(version=0, run_data=run_data)))
